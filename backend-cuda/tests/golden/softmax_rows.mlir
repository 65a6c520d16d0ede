// kernel k0_row_reduction
cuda_tile.module @tir {
  entry @tir_row_reduction(%0: tile<ptr<f32>>, %1: tile<ptr<f32>>, %2: tile<i64>, %3: tile<i64>) optimization_hints = #cuda_tile.optimization_hints<default = {occupancy = 4}> {
    %4 = assume div_by<16>, %0 : tile<ptr<f32>>
    %5 = assume div_by<16>, %1 : tile<ptr<f32>>
    %6, %7, %8 = get_tile_block_id : tile<i32>
    %9 = exti %6 unsigned : tile<i32> -> tile<i64>
    %10 = divi %9, %3 signed : tile<i64>
    %11 = remi %9, %3 signed : tile<i64>
    %12 = constant <i64: 8> : tile<i64>
    %13 = constant <i64: 1000> : tile<i64>
    %14 = constant <i64: 1> : tile<i64>
    %15 = constant <i64: 0> : tile<i64>
    %16 = constant <i64: 1024> : tile<i64>
    %17 = muli %11, %16 : tile<i64>
    %18 = make_token : token
    %19 = constant <i64: 0> : tile<i64>
    %20 = make_tensor_view %4, shape = [8, 1000], strides = [1000, 1] : tensor_view<8x1000xf32, strides=[1000,1]>
    %21 = make_partition_view %20 : partition_view<tile=(4x1024), padding_value = zero, tensor_view<8x1000xf32, strides=[1000,1]>>
    %22, %23 = load_view_tko weak %21[%10, %11] optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : partition_view<tile=(4x1024), padding_value = zero, tensor_view<8x1000xf32, strides=[1000,1]>>, tile<i64> -> tile<4x1024xf32>, token
    %24 = reshape %15 : tile<i64> -> tile<1x1xi64>
    %25 = broadcast %24 : tile<1x1xi64> -> tile<4x1024xi64>
    %26 = reshape %17 : tile<i64> -> tile<1x1xi64>
    %27 = broadcast %26 : tile<1x1xi64> -> tile<4x1024xi64>
    %28 = iota : tile<1024xi64>
    %29 = reshape %28 : tile<1024xi64> -> tile<1x1024xi64>
    %30 = broadcast %29 : tile<1x1024xi64> -> tile<4x1024xi64>
    %31 = addi %27, %30 : tile<4x1024xi64>
    %32 = reshape %14 : tile<i64> -> tile<1x1xi64>
    %33 = broadcast %32 : tile<1x1xi64> -> tile<4x1024xi64>
    %34 = muli %31, %33 : tile<4x1024xi64>
    %35 = addi %25, %34 : tile<4x1024xi64>
    %36 = reshape %15 : tile<i64> -> tile<1x1xi64>
    %37 = broadcast %36 : tile<1x1xi64> -> tile<4x1024xi64>
    %38 = reshape %13 : tile<i64> -> tile<1x1xi64>
    %39 = broadcast %38 : tile<1x1xi64> -> tile<4x1024xi64>
    %40 = cmpi greater_than_or_equal %35, %37, signed : tile<4x1024xi64> -> tile<4x1024xi1>
    %41 = cmpi less_than %35, %39, signed : tile<4x1024xi64> -> tile<4x1024xi1>
    %42 = andi %40, %41 : tile<4x1024xi1>
    %43 = constant <f32: -inf> : tile<f32>
    %44 = reshape %43 : tile<f32> -> tile<1x1xf32>
    %45 = broadcast %44 : tile<1x1xf32> -> tile<4x1024xf32>
    %46 = select %42, %22, %45 : tile<4x1024xi1>, tile<4x1024xf32>
    %50 = reduce %46 dim=1 identities=[-inf] : tile<4x1024xf32> -> tile<4xf32> {
    ^bb0(%47: tile<f32>, %48: tile<f32>):
      %49 = maxf %47, %48 propagate_nan : tile<f32>
      yield %49 : tile<f32>
    }
    %51 = reshape %50 : tile<4xf32> -> tile<4x1xf32>
    %52 = broadcast %51 : tile<4x1xf32> -> tile<4x1024xf32>
    %53 = subf %22, %52 : tile<4x1024xf32>
    %54 = exp %53 : tile<4x1024xf32>
    %55 = reshape %15 : tile<i64> -> tile<1x1xi64>
    %56 = broadcast %55 : tile<1x1xi64> -> tile<4x1024xi64>
    %57 = reshape %14 : tile<i64> -> tile<1x1xi64>
    %58 = broadcast %57 : tile<1x1xi64> -> tile<4x1024xi64>
    %59 = muli %31, %58 : tile<4x1024xi64>
    %60 = addi %56, %59 : tile<4x1024xi64>
    %61 = reshape %15 : tile<i64> -> tile<1x1xi64>
    %62 = broadcast %61 : tile<1x1xi64> -> tile<4x1024xi64>
    %63 = reshape %13 : tile<i64> -> tile<1x1xi64>
    %64 = broadcast %63 : tile<1x1xi64> -> tile<4x1024xi64>
    %65 = cmpi greater_than_or_equal %60, %62, signed : tile<4x1024xi64> -> tile<4x1024xi1>
    %66 = cmpi less_than %60, %64, signed : tile<4x1024xi64> -> tile<4x1024xi1>
    %67 = andi %65, %66 : tile<4x1024xi1>
    %68 = constant <f32: 0.0> : tile<f32>
    %69 = reshape %68 : tile<f32> -> tile<1x1xf32>
    %70 = broadcast %69 : tile<1x1xf32> -> tile<4x1024xf32>
    %71 = select %67, %54, %70 : tile<4x1024xi1>, tile<4x1024xf32>
    %75 = reduce %71 dim=1 identities=[0] : tile<4x1024xf32> -> tile<4xf32> {
    ^bb0(%72: tile<f32>, %73: tile<f32>):
      %74 = addf %72, %73 : tile<f32>
      yield %74 : tile<f32>
    }
    %76 = reshape %75 : tile<4xf32> -> tile<4x1xf32>
    %77 = broadcast %76 : tile<4x1xf32> -> tile<4x1024xf32>
    %78 = divf %54, %77 : tile<4x1024xf32>
    %79 = make_tensor_view %5, shape = [8, 1000], strides = [1000, 1] : tensor_view<8x1000xf32, strides=[1000,1]>
    %80 = make_partition_view %79 : partition_view<tile=(4x1024), tensor_view<8x1000xf32, strides=[1000,1]>>
    %81 = store_view_tko weak %78, %80[%10, %11] token = %18 optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : tile<4x1024xf32>, partition_view<tile=(4x1024), tensor_view<8x1000xf32, strides=[1000,1]>>, tile<i64> -> token
    return
  }
}

