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
    %24 = reshape %17 : tile<i64> -> tile<1x1xi64>
    %25 = broadcast %24 : tile<1x1xi64> -> tile<1x1024xi64>
    %26 = iota : tile<1024xi64>
    %27 = reshape %26 : tile<1024xi64> -> tile<1x1024xi64>
    %28 = addi %25, %27 : tile<1x1024xi64>
    %29 = reshape %15 : tile<i64> -> tile<1x1xi64>
    %30 = broadcast %29 : tile<1x1xi64> -> tile<1x1024xi64>
    %31 = reshape %13 : tile<i64> -> tile<1x1xi64>
    %32 = broadcast %31 : tile<1x1xi64> -> tile<1x1024xi64>
    %33 = cmpi greater_than_or_equal %28, %30, signed : tile<1x1024xi64> -> tile<1x1024xi1>
    %34 = cmpi less_than %28, %32, signed : tile<1x1024xi64> -> tile<1x1024xi1>
    %35 = andi %33, %34 : tile<1x1024xi1>
    %36 = broadcast %35 : tile<1x1024xi1> -> tile<4x1024xi1>
    %37 = constant <f32: -inf> : tile<f32>
    %38 = reshape %37 : tile<f32> -> tile<1x1xf32>
    %39 = broadcast %38 : tile<1x1xf32> -> tile<4x1024xf32>
    %40 = select %36, %22, %39 : tile<4x1024xi1>, tile<4x1024xf32>
    %44 = reduce %40 dim=1 identities=[-inf] : tile<4x1024xf32> -> tile<4xf32> {
    ^bb0(%41: tile<f32>, %42: tile<f32>):
      %43 = maxf %41, %42 propagate_nan : tile<f32>
      yield %43 : tile<f32>
    }
    %45 = reshape %44 : tile<4xf32> -> tile<4x1xf32>
    %46 = broadcast %45 : tile<4x1xf32> -> tile<4x1024xf32>
    %47 = subf %22, %46 : tile<4x1024xf32>
    %48 = exp %47 : tile<4x1024xf32>
    %49 = reshape %17 : tile<i64> -> tile<1x1xi64>
    %50 = broadcast %49 : tile<1x1xi64> -> tile<1x1024xi64>
    %51 = iota : tile<1024xi64>
    %52 = reshape %51 : tile<1024xi64> -> tile<1x1024xi64>
    %53 = addi %50, %52 : tile<1x1024xi64>
    %54 = reshape %15 : tile<i64> -> tile<1x1xi64>
    %55 = broadcast %54 : tile<1x1xi64> -> tile<1x1024xi64>
    %56 = reshape %13 : tile<i64> -> tile<1x1xi64>
    %57 = broadcast %56 : tile<1x1xi64> -> tile<1x1024xi64>
    %58 = cmpi greater_than_or_equal %53, %55, signed : tile<1x1024xi64> -> tile<1x1024xi1>
    %59 = cmpi less_than %53, %57, signed : tile<1x1024xi64> -> tile<1x1024xi1>
    %60 = andi %58, %59 : tile<1x1024xi1>
    %61 = broadcast %60 : tile<1x1024xi1> -> tile<4x1024xi1>
    %62 = constant <f32: 0.0> : tile<f32>
    %63 = reshape %62 : tile<f32> -> tile<1x1xf32>
    %64 = broadcast %63 : tile<1x1xf32> -> tile<4x1024xf32>
    %65 = select %61, %48, %64 : tile<4x1024xi1>, tile<4x1024xf32>
    %69 = reduce %65 dim=1 identities=[0] : tile<4x1024xf32> -> tile<4xf32> {
    ^bb0(%66: tile<f32>, %67: tile<f32>):
      %68 = addf %66, %67 : tile<f32>
      yield %68 : tile<f32>
    }
    %70 = reshape %69 : tile<4xf32> -> tile<4x1xf32>
    %71 = broadcast %70 : tile<4x1xf32> -> tile<4x1024xf32>
    %72 = divf %48, %71 : tile<4x1024xf32>
    %73 = make_tensor_view %5, shape = [8, 1000], strides = [1000, 1] : tensor_view<8x1000xf32, strides=[1000,1]>
    %74 = make_partition_view %73 : partition_view<tile=(4x1024), tensor_view<8x1000xf32, strides=[1000,1]>>
    %75 = store_view_tko weak %72, %74[%10, %11] token = %18 optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : tile<4x1024xf32>, partition_view<tile=(4x1024), tensor_view<8x1000xf32, strides=[1000,1]>>, tile<i64> -> token
    return
  }
}

