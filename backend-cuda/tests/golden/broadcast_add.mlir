// kernel k0_elementwise
cuda_tile.module @tir {
  entry @tir_elementwise(%0: tile<ptr<f16>>, %1: tile<ptr<f16>>, %2: tile<ptr<f16>>, %3: tile<i64>, %4: tile<i64>, %5: tile<i64>) {
    %6, %7, %8 = get_tile_block_id : tile<i32>
    %9 = exti %6 unsigned : tile<i32> -> tile<i64>
    %10 = divi %9, %5 signed : tile<i64>
    %11 = remi %9, %5 signed : tile<i64>
    %12 = constant <i64: 64> : tile<i64>
    %13 = constant <i64: 0> : tile<i64>
    %14 = constant <i64: 1> : tile<i64>
    %15 = make_token : token
    %16 = constant <i64: 0> : tile<i64>
    %17 = make_tensor_view %0, shape = [%3, 64], strides = [64, 1] : tile<i64> -> tensor_view<?x64xf16, strides=[64,1]>
    %18 = make_partition_view %17 : partition_view<tile=(16x64), padding_value = zero, tensor_view<?x64xf16, strides=[64,1]>>
    %19, %20 = load_view_tko weak %18[%10, %11] : partition_view<tile=(16x64), padding_value = zero, tensor_view<?x64xf16, strides=[64,1]>>, tile<i64> -> tile<16x64xf16>, token
    %21 = constant <i64: 0> : tile<i64>
    %22 = make_tensor_view %1, shape = [1, 64], strides = [1, 1] : tensor_view<1x64xf16, strides=[1,1]>
    %23 = make_partition_view %22 : partition_view<tile=(1x64), padding_value = zero, tensor_view<1x64xf16, strides=[1,1]>>
    %24, %25 = load_view_tko weak %23[%21, %11] : partition_view<tile=(1x64), padding_value = zero, tensor_view<1x64xf16, strides=[1,1]>>, tile<i64> -> tile<1x64xf16>, token
    %26 = broadcast %24 : tile<1x64xf16> -> tile<16x64xf16>
    %27 = constant <i64: 16> : tile<i64>
    %28 = muli %10, %27 : tile<i64>
    %29 = reshape %28 : tile<i64> -> tile<1x1xi64>
    %30 = broadcast %29 : tile<1x1xi64> -> tile<16x64xi64>
    %31 = iota : tile<16xi64>
    %32 = reshape %31 : tile<16xi64> -> tile<16x1xi64>
    %33 = broadcast %32 : tile<16x1xi64> -> tile<16x64xi64>
    %34 = addi %30, %33 : tile<16x64xi64>
    %35 = reshape %3 : tile<i64> -> tile<1x1xi64>
    %36 = broadcast %35 : tile<1x1xi64> -> tile<16x64xi64>
    %37 = cmpi less_than %34, %36, signed : tile<16x64xi64> -> tile<16x64xi1>
    %38 = constant <f16: 0.0> : tile<f16>
    %39 = reshape %38 : tile<f16> -> tile<1x1xf16>
    %40 = broadcast %39 : tile<1x1xf16> -> tile<16x64xf16>
    %41 = select %37, %26, %40 : tile<16x64xi1>, tile<16x64xf16>
    %42 = ftof %19 : tile<16x64xf16> -> tile<16x64xf32>
    %43 = ftof %41 : tile<16x64xf16> -> tile<16x64xf32>
    %44 = addf %42, %43 : tile<16x64xf32>
    %45 = ftof %44 : tile<16x64xf32> -> tile<16x64xf16>
    %46 = ftof %45 : tile<16x64xf16> -> tile<16x64xf32>
    %47 = constant <f32: 0.0> : tile<f32>
    %48 = reshape %47 : tile<f32> -> tile<1x1xf32>
    %49 = broadcast %48 : tile<1x1xf32> -> tile<16x64xf32>
    %50 = maxf %46, %49 propagate_nan : tile<16x64xf32>
    %51 = ftof %50 : tile<16x64xf32> -> tile<16x64xf16>
    %52 = make_tensor_view %2, shape = [%3, 64], strides = [64, 1] : tile<i64> -> tensor_view<?x64xf16, strides=[64,1]>
    %53 = make_partition_view %52 : partition_view<tile=(16x64), tensor_view<?x64xf16, strides=[64,1]>>
    %54 = store_view_tko weak %51, %53[%10, %11] token = %15 : tile<16x64xf16>, partition_view<tile=(16x64), tensor_view<?x64xf16, strides=[64,1]>>, tile<i64> -> token
    return
  }
}

