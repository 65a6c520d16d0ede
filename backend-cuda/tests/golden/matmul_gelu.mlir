// kernel k0_matmul
cuda_tile.module @tir {
  entry @tir_matmul(%0: tile<ptr<bf16>>, %1: tile<ptr<bf16>>, %2: tile<ptr<bf16>>, %3: tile<i64>, %4: tile<i64>, %5: tile<i64>) {
    %6 = assume div_by<16>, %0 : tile<ptr<bf16>>
    %7 = assume div_by<16>, %1 : tile<ptr<bf16>>
    %8 = assume div_by<16>, %2 : tile<ptr<bf16>>
    %9, %10, %11 = get_tile_block_id : tile<i32>
    %12 = exti %9 unsigned : tile<i32> -> tile<i64>
    %13 = muli %4, %5 : tile<i64>
    %14 = remi %12, %13 signed : tile<i64>
    %15 = constant <i64: 8> : tile<i64>
    %16 = muli %15, %5 : tile<i64>
    %17 = divi %14, %16 signed : tile<i64>
    %18 = muli %17, %15 : tile<i64>
    %19 = subi %4, %18 : tile<i64>
    %20 = mini %19, %15 signed : tile<i64>
    %21 = remi %14, %16 signed : tile<i64>
    %22 = remi %21, %20 signed : tile<i64>
    %23 = addi %18, %22 : tile<i64>
    %24 = divi %21, %20 signed : tile<i64>
    %25 = muli %4, %5 : tile<i64>
    %26 = remi %12, %25 signed : tile<i64>
    %27 = constant <i64: 8> : tile<i64>
    %28 = muli %27, %5 : tile<i64>
    %29 = divi %26, %28 signed : tile<i64>
    %30 = muli %29, %27 : tile<i64>
    %31 = subi %4, %30 : tile<i64>
    %32 = mini %31, %27 signed : tile<i64>
    %33 = remi %26, %28 signed : tile<i64>
    %34 = remi %33, %32 signed : tile<i64>
    %35 = addi %30, %34 : tile<i64>
    %36 = divi %33, %32 signed : tile<i64>
    %37 = constant <i64: 192> : tile<i64>
    %38 = constant <i64: 0> : tile<i64>
    %39 = constant <i64: 256> : tile<i64>
    %40 = constant <i64: 31> : tile<i64>
    %41 = constant <i64: 32> : tile<i64>
    %42 = constant <i64: 287> : tile<i64>
    %43 = constant <i64: 8> : tile<i64>
    %44 = constant <i64: 1> : tile<i64>
    %45 = make_token : token
    %46 = constant <f32: 0.0> : tile<f32>
    %47 = reshape %46 : tile<f32> -> tile<1x1xf32>
    %48 = broadcast %47 : tile<1x1xf32> -> tile<128x128xf32>
    %62 = for %49 in (%38 to %43, step %44) : tile<i64> iter_values(%50 = %48) -> (tile<128x128xf32>) {
      %51 = constant <i64: 0> : tile<i64>
      %52 = make_tensor_view %6, shape = [%3, 256], strides = [256, 1] : tile<i64> -> tensor_view<?x256xbf16, strides=[256,1]>
      %53 = make_partition_view %52 : partition_view<tile=(128x32), padding_value = zero, tensor_view<?x256xbf16, strides=[256,1]>>
      %54, %55 = load_view_tko weak %53[%23, %49] : partition_view<tile=(128x32), padding_value = zero, tensor_view<?x256xbf16, strides=[256,1]>>, tile<i64> -> tile<128x32xbf16>, token
      %56 = constant <i64: 0> : tile<i64>
      %57 = make_tensor_view %7, shape = [256, 192], strides = [192, 1] : tensor_view<256x192xbf16, strides=[192,1]>
      %58 = make_partition_view %57 : partition_view<tile=(32x128), padding_value = zero, tensor_view<256x192xbf16, strides=[192,1]>>
      %59, %60 = load_view_tko weak %58[%49, %36] : partition_view<tile=(32x128), padding_value = zero, tensor_view<256x192xbf16, strides=[192,1]>>, tile<i64> -> tile<32x128xbf16>, token
      %61 = mmaf %54, %59, %50 : tile<128x32xbf16>, tile<32x128xbf16>, tile<128x128xf32>
      continue %61 : tile<128x128xf32>
    }
    %63 = ftof %62 : tile<128x128xf32> -> tile<128x128xbf16>
    %64 = ftof %63 : tile<128x128xbf16> -> tile<128x128xf32>
    %65 = constant <f32: 0.7978845834732056> : tile<f32>
    %66 = reshape %65 : tile<f32> -> tile<1x1xf32>
    %67 = broadcast %66 : tile<1x1xf32> -> tile<128x128xf32>
    %68 = constant <f32: 0.044714998453855515> : tile<f32>
    %69 = reshape %68 : tile<f32> -> tile<1x1xf32>
    %70 = broadcast %69 : tile<1x1xf32> -> tile<128x128xf32>
    %71 = mulf %64, %64 : tile<128x128xf32>
    %72 = mulf %71, %64 : tile<128x128xf32>
    %73 = mulf %70, %72 : tile<128x128xf32>
    %74 = addf %64, %73 : tile<128x128xf32>
    %75 = mulf %67, %74 : tile<128x128xf32>
    %76 = tanh %75 : tile<128x128xf32>
    %77 = constant <f32: 1.0> : tile<f32>
    %78 = reshape %77 : tile<f32> -> tile<1x1xf32>
    %79 = broadcast %78 : tile<1x1xf32> -> tile<128x128xf32>
    %80 = constant <f32: 0.5> : tile<f32>
    %81 = reshape %80 : tile<f32> -> tile<1x1xf32>
    %82 = broadcast %81 : tile<1x1xf32> -> tile<128x128xf32>
    %83 = addf %79, %76 : tile<128x128xf32>
    %84 = mulf %82, %64 : tile<128x128xf32>
    %85 = mulf %84, %83 : tile<128x128xf32>
    %86 = ftof %85 : tile<128x128xf32> -> tile<128x128xbf16>
    %87 = make_tensor_view %8, shape = [%3, 192], strides = [192, 1] : tile<i64> -> tensor_view<?x192xbf16, strides=[192,1]>
    %88 = make_partition_view %87 : partition_view<tile=(128x128), tensor_view<?x192xbf16, strides=[192,1]>>
    %89 = store_view_tko weak %86, %88[%23, %36] token = %45 : tile<128x128xbf16>, partition_view<tile=(128x128), tensor_view<?x192xbf16, strides=[192,1]>>, tile<i64> -> token
    return
  }
}

