// kernel k0_row_reduction
cuda_tile.module @tir {
  entry @tir_row_reduction(%0: tile<ptr<f32>>, %1: tile<ptr<f32>>, %2: tile<i64>, %3: tile<i64>) {
    %4, %5, %6 = get_tile_block_id : tile<i32>
    %7 = exti %4 unsigned : tile<i32> -> tile<i64>
    %8 = divi %7, %3 signed : tile<i64>
    %9 = remi %7, %3 signed : tile<i64>
    %10 = constant <i64: 8> : tile<i64>
    %11 = constant <i64: 1000> : tile<i64>
    %12 = constant <i64: 1> : tile<i64>
    %13 = constant <i64: 0> : tile<i64>
    %14 = constant <i64: 1024> : tile<i64>
    %15 = muli %9, %14 : tile<i64>
    %16 = make_token : token
    %17 = constant <i64: 0> : tile<i64>
    %18 = make_tensor_view %0, shape = [8, 1000], strides = [1000, 1] : tensor_view<8x1000xf32, strides=[1000,1]>
    %19 = make_partition_view %18 : partition_view<tile=(8x1024), padding_value = zero, tensor_view<8x1000xf32, strides=[1000,1]>>
    %20, %21 = load_view_tko weak %19[%8, %9] : partition_view<tile=(8x1024), padding_value = zero, tensor_view<8x1000xf32, strides=[1000,1]>>, tile<i64> -> tile<8x1024xf32>, token
    %22 = reshape %13 : tile<i64> -> tile<1x1xi64>
    %23 = broadcast %22 : tile<1x1xi64> -> tile<8x1024xi64>
    %24 = reshape %15 : tile<i64> -> tile<1x1xi64>
    %25 = broadcast %24 : tile<1x1xi64> -> tile<8x1024xi64>
    %26 = iota : tile<1024xi64>
    %27 = reshape %26 : tile<1024xi64> -> tile<1x1024xi64>
    %28 = broadcast %27 : tile<1x1024xi64> -> tile<8x1024xi64>
    %29 = addi %25, %28 : tile<8x1024xi64>
    %30 = reshape %12 : tile<i64> -> tile<1x1xi64>
    %31 = broadcast %30 : tile<1x1xi64> -> tile<8x1024xi64>
    %32 = muli %29, %31 : tile<8x1024xi64>
    %33 = addi %23, %32 : tile<8x1024xi64>
    %34 = reshape %13 : tile<i64> -> tile<1x1xi64>
    %35 = broadcast %34 : tile<1x1xi64> -> tile<8x1024xi64>
    %36 = reshape %11 : tile<i64> -> tile<1x1xi64>
    %37 = broadcast %36 : tile<1x1xi64> -> tile<8x1024xi64>
    %38 = cmpi greater_than_or_equal %33, %35, signed : tile<8x1024xi64> -> tile<8x1024xi1>
    %39 = cmpi less_than %33, %37, signed : tile<8x1024xi64> -> tile<8x1024xi1>
    %40 = andi %38, %39 : tile<8x1024xi1>
    %41 = constant <f32: -inf> : tile<f32>
    %42 = reshape %41 : tile<f32> -> tile<1x1xf32>
    %43 = broadcast %42 : tile<1x1xf32> -> tile<8x1024xf32>
    %44 = select %40, %20, %43 : tile<8x1024xi1>, tile<8x1024xf32>
    %48 = reduce %44 dim=1 identities=[-inf] : tile<8x1024xf32> -> tile<8xf32> {
    ^bb0(%45: tile<f32>, %46: tile<f32>):
      %47 = maxf %45, %46 propagate_nan : tile<f32>
      yield %47 : tile<f32>
    }
    %49 = reshape %48 : tile<8xf32> -> tile<8x1xf32>
    %50 = broadcast %49 : tile<8x1xf32> -> tile<8x1024xf32>
    %51 = subf %20, %50 : tile<8x1024xf32>
    %52 = exp %51 : tile<8x1024xf32>
    %53 = reshape %13 : tile<i64> -> tile<1x1xi64>
    %54 = broadcast %53 : tile<1x1xi64> -> tile<8x1024xi64>
    %55 = reshape %12 : tile<i64> -> tile<1x1xi64>
    %56 = broadcast %55 : tile<1x1xi64> -> tile<8x1024xi64>
    %57 = muli %29, %56 : tile<8x1024xi64>
    %58 = addi %54, %57 : tile<8x1024xi64>
    %59 = reshape %13 : tile<i64> -> tile<1x1xi64>
    %60 = broadcast %59 : tile<1x1xi64> -> tile<8x1024xi64>
    %61 = reshape %11 : tile<i64> -> tile<1x1xi64>
    %62 = broadcast %61 : tile<1x1xi64> -> tile<8x1024xi64>
    %63 = cmpi greater_than_or_equal %58, %60, signed : tile<8x1024xi64> -> tile<8x1024xi1>
    %64 = cmpi less_than %58, %62, signed : tile<8x1024xi64> -> tile<8x1024xi1>
    %65 = andi %63, %64 : tile<8x1024xi1>
    %66 = constant <f32: 0.0> : tile<f32>
    %67 = reshape %66 : tile<f32> -> tile<1x1xf32>
    %68 = broadcast %67 : tile<1x1xf32> -> tile<8x1024xf32>
    %69 = select %65, %52, %68 : tile<8x1024xi1>, tile<8x1024xf32>
    %73 = reduce %69 dim=1 identities=[0] : tile<8x1024xf32> -> tile<8xf32> {
    ^bb0(%70: tile<f32>, %71: tile<f32>):
      %72 = addf %70, %71 : tile<f32>
      yield %72 : tile<f32>
    }
    %74 = reshape %73 : tile<8xf32> -> tile<8x1xf32>
    %75 = broadcast %74 : tile<8x1xf32> -> tile<8x1024xf32>
    %76 = divf %52, %75 : tile<8x1024xf32>
    %77 = make_tensor_view %1, shape = [8, 1000], strides = [1000, 1] : tensor_view<8x1000xf32, strides=[1000,1]>
    %78 = make_partition_view %77 : partition_view<tile=(8x1024), tensor_view<8x1000xf32, strides=[1000,1]>>
    %79 = store_view_tko weak %76, %78[%8, %9] token = %16 : tile<8x1024xf32>, partition_view<tile=(8x1024), tensor_view<8x1000xf32, strides=[1000,1]>>, tile<i64> -> token
    return
  }
}

