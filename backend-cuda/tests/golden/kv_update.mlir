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
    %61 = for %26 in (%20 to %19, step %14) : tile<i64> iter_values(%27 = %25) -> (tile<4x8xf32>) {
      %28 = constant <i64: 0> : tile<i64>
      %29 = make_tensor_view %4, shape = [4, 8, 16], strides = [128, 1, 8] : tensor_view<4x8x16xf16, strides=[128,1,8]>
      %30 = make_partition_view %29 : partition_view<tile=(4x8x16), padding_value = zero, tensor_view<4x8x16xf16, strides=[128,1,8]>>
      %31, %32 = load_view_tko weak %30[%10, %11, %26] optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : partition_view<tile=(4x8x16), padding_value = zero, tensor_view<4x8x16xf16, strides=[128,1,8]>>, tile<i64> -> tile<4x8x16xf16>, token
      %33 = muli %26, %15 : tile<i64>
      %34 = reshape %33 : tile<i64> -> tile<1x1x1xi64>
      %35 = broadcast %34 : tile<1x1x1xi64> -> tile<1x1x16xi64>
      %36 = iota : tile<16xi64>
      %37 = reshape %36 : tile<16xi64> -> tile<1x1x16xi64>
      %38 = addi %35, %37 : tile<1x1x16xi64>
      %39 = reshape %20 : tile<i64> -> tile<1x1x1xi64>
      %40 = broadcast %39 : tile<1x1x1xi64> -> tile<1x1x16xi64>
      %41 = reshape %16 : tile<i64> -> tile<1x1x1xi64>
      %42 = broadcast %41 : tile<1x1x1xi64> -> tile<1x1x16xi64>
      %43 = cmpi greater_than_or_equal %38, %40, signed : tile<1x1x16xi64> -> tile<1x1x16xi1>
      %44 = cmpi less_than %38, %42, signed : tile<1x1x16xi64> -> tile<1x1x16xi1>
      %45 = andi %43, %44 : tile<1x1x16xi1>
      %46 = broadcast %45 : tile<1x1x16xi1> -> tile<4x8x16xi1>
      %47 = constant <f16: 0.0> : tile<f16>
      %48 = reshape %47 : tile<f16> -> tile<1x1x1xf16>
      %49 = broadcast %48 : tile<1x1x1xf16> -> tile<4x8x16xf16>
      %50 = select %46, %31, %49 : tile<4x8x16xi1>, tile<4x8x16xf16>
      %51 = ftof %50 : tile<4x8x16xf16> -> tile<4x8x16xf32>
      %55 = reduce %51 dim=2 identities=[0] : tile<4x8x16xf32> -> tile<4x8xf32> {
      ^bb0(%52: tile<f32>, %53: tile<f32>):
        %54 = addf %52, %53 : tile<f32>
        yield %54 : tile<f32>
      }
      %56 = reshape %55 : tile<4x8xf32> -> tile<4x8x1xf32>
      %57 = ftof %56 : tile<4x8x1xf32> -> tile<4x8x1xf16>
      %58 = reshape %57 : tile<4x8x1xf16> -> tile<4x8xf16>
      %59 = ftof %58 : tile<4x8xf16> -> tile<4x8xf32>
      %60 = addf %27, %59 : tile<4x8xf32>
      continue %60 : tile<4x8xf32>
    }
    %62 = ftof %61 : tile<4x8xf32> -> tile<4x8xf16>
    %63 = make_tensor_view %5, shape = [4, 8], strides = [8, 1] : tensor_view<4x8xf16, strides=[8,1]>
    %64 = make_partition_view %63 : partition_view<tile=(4x8), tensor_view<4x8xf16, strides=[8,1]>>
    %65 = store_view_tko weak %62, %64[%10, %11] token = %22 optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : tile<4x8xf16>, partition_view<tile=(4x8), tensor_view<4x8xf16, strides=[8,1]>>, tile<i64> -> token
    return
  }
}

