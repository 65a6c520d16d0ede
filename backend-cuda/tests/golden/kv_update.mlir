// kernel k0_state_update
cuda_tile.module @tir {
  entry @tir_state_update(%0: tile<ptr<i64>>, %1: tile<ptr<f16>>, %2: tile<ptr<f16>>, %3: tile<i64>, %4: tile<i64>, %5: tile<i64>) {
    %6 = assume div_by<16>, %0 : tile<ptr<i64>>
    %7 = assume div_by<16>, %1 : tile<ptr<f16>>
    %8 = assume div_by<16>, %2 : tile<ptr<f16>>
    %9, %10, %11 = get_tile_block_id : tile<i32>
    %12 = exti %9 unsigned : tile<i32> -> tile<i64>
    %13 = muli %4, %5 : tile<i64>
    %14 = divi %12, %13 signed : tile<i64>
    %15 = divi %12, %5 signed : tile<i64>
    %16 = remi %15, %4 signed : tile<i64>
    %17 = remi %12, %5 signed : tile<i64>
    %18 = constant <i64: 4> : tile<i64>
    %19 = constant <i64: 1> : tile<i64>
    %20 = constant <i64: 8> : tile<i64>
    %21 = constant <i64: 0> : tile<i64>
    %22 = constant <i64: 8> : tile<i64>
    %23 = constant <i64: 16> : tile<i64>
    %24 = constant <i64: 128> : tile<i64>
    %25 = make_token : token
    %26 = constant <i64: 0> : tile<i64>
    %27 = make_tensor_view %8, shape = [4, 1, 8], strides = [8, 8, 1] : tensor_view<4x1x8xf16, strides=[8,8,1]>
    %28 = make_partition_view %27 : partition_view<tile=(4x1x8), padding_value = zero, tensor_view<4x1x8xf16, strides=[8,8,1]>>
    %29, %30 = load_view_tko weak %28[%14, %16, %17] optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : partition_view<tile=(4x1x8), padding_value = zero, tensor_view<4x1x8xf16, strides=[8,8,1]>>, tile<i64> -> tile<4x1x8xf16>, token
    %31 = offset %6, %21 : tile<ptr<i64>>, tile<i64> -> tile<ptr<i64>>
    %32, %33 = load_ptr_tko weak %31 : tile<ptr<i64>> -> tile<i64>, token
    %34 = muli %32, %22 : tile<i64>
    %35 = offset %7, %34 : tile<ptr<f16>>, tile<i64> -> tile<ptr<f16>>
    %36 = assume div_by<16>, %35 : tile<ptr<f16>>
    %37 = make_tensor_view %36, shape = [4, 1, 8], strides = [128, 8, 1] : tensor_view<4x1x8xf16, strides=[128,8,1]>
    %38 = make_partition_view %37 : partition_view<tile=(4x1x8), tensor_view<4x1x8xf16, strides=[128,8,1]>>
    %39 = store_view_tko weak %29, %38[%14, %16, %17] token = %25 optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : tile<4x1x8xf16>, partition_view<tile=(4x1x8), tensor_view<4x1x8xf16, strides=[128,8,1]>>, tile<i64> -> token
    return
  }
}

// kernel k1_reduction
cuda_tile.module @tir {
  entry @tir_reduction(%0: tile<ptr<f16>>, %1: tile<ptr<f16>>, %2: tile<i64>, %3: tile<i64>) {
    %4 = assume div_by<16>, %0 : tile<ptr<f16>>
    %5 = assume div_by<16>, %1 : tile<ptr<f16>>
    %6, %7, %8 = get_tile_block_id : tile<i32>
    %9 = exti %6 unsigned : tile<i32> -> tile<i64>
    %10 = divi %9, %3 signed : tile<i64>
    %11 = remi %9, %3 signed : tile<i64>
    %12 = constant <i64: 4> : tile<i64>
    %13 = constant <i64: 8> : tile<i64>
    %14 = constant <i64: 1> : tile<i64>
    %15 = constant <i64: 16> : tile<i64>
    %16 = constant <i64: 16> : tile<i64>
    %17 = constant <i64: 15> : tile<i64>
    %18 = constant <i64: 31> : tile<i64>
    %19 = constant <i64: 1> : tile<i64>
    %20 = constant <i64: 0> : tile<i64>
    %21 = constant <i64: 128> : tile<i64>
    %22 = make_token : token
    %23 = constant <f32: 0.0> : tile<f32>
    %24 = reshape %23 : tile<f32> -> tile<1x1xf32>
    %25 = broadcast %24 : tile<1x1xf32> -> tile<4x8xf32>
    %67 = for %26 in (%20 to %19, step %14) : tile<i64> iter_values(%27 = %25) -> (tile<4x8xf32>) {
      %28 = constant <i64: 0> : tile<i64>
      %29 = make_tensor_view %4, shape = [4, 8, 16], strides = [128, 1, 8] : tensor_view<4x8x16xf16, strides=[128,1,8]>
      %30 = make_partition_view %29 : partition_view<tile=(4x8x16), padding_value = zero, tensor_view<4x8x16xf16, strides=[128,1,8]>>
      %31, %32 = load_view_tko weak %30[%10, %11, %26] optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : partition_view<tile=(4x8x16), padding_value = zero, tensor_view<4x8x16xf16, strides=[128,1,8]>>, tile<i64> -> tile<4x8x16xf16>, token
      %33 = reshape %20 : tile<i64> -> tile<1x1x1xi64>
      %34 = broadcast %33 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %35 = muli %26, %15 : tile<i64>
      %36 = reshape %35 : tile<i64> -> tile<1x1x1xi64>
      %37 = broadcast %36 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %38 = iota : tile<16xi64>
      %39 = reshape %38 : tile<16xi64> -> tile<1x1x16xi64>
      %40 = broadcast %39 : tile<1x1x16xi64> -> tile<4x8x16xi64>
      %41 = addi %37, %40 : tile<4x8x16xi64>
      %42 = reshape %14 : tile<i64> -> tile<1x1x1xi64>
      %43 = broadcast %42 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %44 = muli %41, %43 : tile<4x8x16xi64>
      %45 = addi %34, %44 : tile<4x8x16xi64>
      %46 = reshape %20 : tile<i64> -> tile<1x1x1xi64>
      %47 = broadcast %46 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %48 = reshape %16 : tile<i64> -> tile<1x1x1xi64>
      %49 = broadcast %48 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %50 = cmpi greater_than_or_equal %45, %47, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %51 = cmpi less_than %45, %49, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %52 = andi %50, %51 : tile<4x8x16xi1>
      %53 = constant <f16: 0.0> : tile<f16>
      %54 = reshape %53 : tile<f16> -> tile<1x1x1xf16>
      %55 = broadcast %54 : tile<1x1x1xf16> -> tile<4x8x16xf16>
      %56 = select %52, %31, %55 : tile<4x8x16xi1>, tile<4x8x16xf16>
      %57 = ftof %56 : tile<4x8x16xf16> -> tile<4x8x16xf32>
      %61 = reduce %57 dim=2 identities=[0] : tile<4x8x16xf32> -> tile<4x8xf32> {
      ^bb0(%58: tile<f32>, %59: tile<f32>):
        %60 = addf %58, %59 : tile<f32>
        yield %60 : tile<f32>
      }
      %62 = reshape %61 : tile<4x8xf32> -> tile<4x8x1xf32>
      %63 = ftof %62 : tile<4x8x1xf32> -> tile<4x8x1xf16>
      %64 = reshape %63 : tile<4x8x1xf16> -> tile<4x8xf16>
      %65 = ftof %64 : tile<4x8xf16> -> tile<4x8xf32>
      %66 = addf %27, %65 : tile<4x8xf32>
      continue %66 : tile<4x8xf32>
    }
    %68 = ftof %67 : tile<4x8xf32> -> tile<4x8xf16>
    %69 = make_tensor_view %5, shape = [4, 8], strides = [8, 1] : tensor_view<4x8xf16, strides=[8,1]>
    %70 = make_partition_view %69 : partition_view<tile=(4x8), tensor_view<4x8xf16, strides=[8,1]>>
    %71 = store_view_tko weak %68, %70[%10, %11] token = %22 optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : tile<4x8xf16>, partition_view<tile=(4x8), tensor_view<4x8xf16, strides=[8,1]>>, tile<i64> -> token
    return
  }
}

