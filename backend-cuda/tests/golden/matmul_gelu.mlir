// kernel k0_matmul
cuda_tile.module @tir {
  entry @tir_matmul(%0: tile<ptr<bf16>>, %1: tile<ptr<bf16>>, %2: tile<ptr<bf16>>, %3: tile<i64>, %4: tile<i64>, %5: tile<i64>) {
    %6, %7, %8 = get_tile_block_id : tile<i32>
    %9 = exti %6 unsigned : tile<i32> -> tile<i64>
    %10 = divi %9, %5 signed : tile<i64>
    %11 = remi %9, %5 signed : tile<i64>
    %12 = constant <i64: 192> : tile<i64>
    %13 = constant <i64: 256> : tile<i64>
    %14 = constant <i64: 63> : tile<i64>
    %15 = constant <i64: 64> : tile<i64>
    %16 = constant <i64: 319> : tile<i64>
    %17 = constant <i64: 4> : tile<i64>
    %18 = constant <i64: 0> : tile<i64>
    %19 = constant <i64: 1> : tile<i64>
    %20 = make_token : token
    %21 = constant <f32: 0.0> : tile<f32>
    %22 = reshape %21 : tile<f32> -> tile<1x1xf32>
    %23 = broadcast %22 : tile<1x1xf32> -> tile<128x128xf32>
    %37 = for %24 in (%18 to %17, step %19) : tile<i64> iter_values(%25 = %23) -> (tile<128x128xf32>) {
      %26 = constant <i64: 0> : tile<i64>
      %27 = make_tensor_view %0, shape = [%3, 256], strides = [256, 1] : tile<i64> -> tensor_view<?x256xbf16, strides=[256,1]>
      %28 = make_partition_view %27 : partition_view<tile=(128x64), padding_value = zero, tensor_view<?x256xbf16, strides=[256,1]>>
      %29, %30 = load_view_tko weak %28[%10, %24] : partition_view<tile=(128x64), padding_value = zero, tensor_view<?x256xbf16, strides=[256,1]>>, tile<i64> -> tile<128x64xbf16>, token
      %31 = constant <i64: 0> : tile<i64>
      %32 = make_tensor_view %1, shape = [256, 192], strides = [192, 1] : tensor_view<256x192xbf16, strides=[192,1]>
      %33 = make_partition_view %32 : partition_view<tile=(64x128), padding_value = zero, tensor_view<256x192xbf16, strides=[192,1]>>
      %34, %35 = load_view_tko weak %33[%24, %11] : partition_view<tile=(64x128), padding_value = zero, tensor_view<256x192xbf16, strides=[192,1]>>, tile<i64> -> tile<64x128xbf16>, token
      %36 = mmaf %29, %34, %25 : tile<128x64xbf16>, tile<64x128xbf16>, tile<128x128xf32>
      continue %36 : tile<128x128xf32>
    }
    %38 = ftof %37 : tile<128x128xf32> -> tile<128x128xbf16>
    %39 = ftof %38 : tile<128x128xbf16> -> tile<128x128xf32>
    %40 = constant <f32: 0.7978845834732056> : tile<f32>
    %41 = reshape %40 : tile<f32> -> tile<1x1xf32>
    %42 = broadcast %41 : tile<1x1xf32> -> tile<128x128xf32>
    %43 = constant <f32: 0.044714998453855515> : tile<f32>
    %44 = reshape %43 : tile<f32> -> tile<1x1xf32>
    %45 = broadcast %44 : tile<1x1xf32> -> tile<128x128xf32>
    %46 = mulf %39, %39 : tile<128x128xf32>
    %47 = mulf %46, %39 : tile<128x128xf32>
    %48 = mulf %45, %47 : tile<128x128xf32>
    %49 = addf %39, %48 : tile<128x128xf32>
    %50 = mulf %42, %49 : tile<128x128xf32>
    %51 = tanh %50 : tile<128x128xf32>
    %52 = constant <f32: 1.0> : tile<f32>
    %53 = reshape %52 : tile<f32> -> tile<1x1xf32>
    %54 = broadcast %53 : tile<1x1xf32> -> tile<128x128xf32>
    %55 = constant <f32: 0.5> : tile<f32>
    %56 = reshape %55 : tile<f32> -> tile<1x1xf32>
    %57 = broadcast %56 : tile<1x1xf32> -> tile<128x128xf32>
    %58 = addf %54, %51 : tile<128x128xf32>
    %59 = mulf %57, %39 : tile<128x128xf32>
    %60 = mulf %59, %58 : tile<128x128xf32>
    %61 = ftof %60 : tile<128x128xf32> -> tile<128x128xbf16>
    %62 = make_tensor_view %2, shape = [%3, 192], strides = [192, 1] : tile<i64> -> tensor_view<?x192xbf16, strides=[192,1]>
    %63 = make_partition_view %62 : partition_view<tile=(128x128), tensor_view<?x192xbf16, strides=[192,1]>>
    %64 = store_view_tko weak %61, %63[%10, %11] token = %20 : tile<128x128xbf16>, partition_view<tile=(128x128), tensor_view<?x192xbf16, strides=[192,1]>>, tile<i64> -> token
    return
  }
}

