// kernel k0_matmul
cuda_tile.module @tir {
  entry @tir_matmul(%0: tile<ptr<bf16>>, %1: tile<ptr<bf16>>, %2: tile<ptr<bf16>>, %3: tile<i64>, %4: tile<i64>, %5: tile<i64>) {
    %6 = assume div_by<16>, %0 : tile<ptr<bf16>>
    %7 = assume div_by<16>, %1 : tile<ptr<bf16>>
    %8 = assume div_by<16>, %2 : tile<ptr<bf16>>
    %9, %10, %11 = get_tile_block_id : tile<i32>
    %12 = exti %9 unsigned : tile<i32> -> tile<i64>
    %13 = muli %4, %5 : tile<i64>
    %14, %15, %16 = get_num_tile_blocks : tile<i32>
    %17 = exti %14 unsigned : tile<i32> -> tile<i64>
    for %18 in (%12 to %13, step %17) : tile<i64> {
      %19 = muli %4, %5 : tile<i64>
      %20 = remi %18, %19 signed : tile<i64>
      %21 = constant <i64: 8> : tile<i64>
      %22 = muli %21, %5 : tile<i64>
      %23 = divi %20, %22 signed : tile<i64>
      %24 = muli %23, %21 : tile<i64>
      %25 = subi %4, %24 : tile<i64>
      %26 = mini %25, %21 signed : tile<i64>
      %27 = remi %20, %22 signed : tile<i64>
      %28 = remi %27, %26 signed : tile<i64>
      %29 = addi %24, %28 : tile<i64>
      %30 = divi %27, %26 signed : tile<i64>
      %31 = muli %4, %5 : tile<i64>
      %32 = remi %18, %31 signed : tile<i64>
      %33 = constant <i64: 8> : tile<i64>
      %34 = muli %33, %5 : tile<i64>
      %35 = divi %32, %34 signed : tile<i64>
      %36 = muli %35, %33 : tile<i64>
      %37 = subi %4, %36 : tile<i64>
      %38 = mini %37, %33 signed : tile<i64>
      %39 = remi %32, %34 signed : tile<i64>
      %40 = remi %39, %38 signed : tile<i64>
      %41 = addi %36, %40 : tile<i64>
      %42 = divi %39, %38 signed : tile<i64>
      %43 = constant <i64: 192> : tile<i64>
      %44 = constant <i64: 256> : tile<i64>
      %45 = constant <i64: 31> : tile<i64>
      %46 = constant <i64: 32> : tile<i64>
      %47 = constant <i64: 287> : tile<i64>
      %48 = constant <i64: 8> : tile<i64>
      %49 = constant <i64: 0> : tile<i64>
      %50 = constant <i64: 1> : tile<i64>
      %51 = make_token : token
      %52 = constant <f32: 0.0> : tile<f32>
      %53 = reshape %52 : tile<f32> -> tile<1x1xf32>
      %54 = broadcast %53 : tile<1x1xf32> -> tile<128x128xf32>
      %68 = for %55 in (%49 to %48, step %50) : tile<i64> iter_values(%56 = %54) -> (tile<128x128xf32>) {
        %57 = constant <i64: 0> : tile<i64>
        %58 = make_tensor_view %6, shape = [%3, 256], strides = [256, 1] : tile<i64> -> tensor_view<?x256xbf16, strides=[256,1]>
        %59 = make_partition_view %58 : partition_view<tile=(128x32), padding_value = zero, tensor_view<?x256xbf16, strides=[256,1]>>
        %60, %61 = load_view_tko weak %59[%29, %55] : partition_view<tile=(128x32), padding_value = zero, tensor_view<?x256xbf16, strides=[256,1]>>, tile<i64> -> tile<128x32xbf16>, token
        %62 = constant <i64: 0> : tile<i64>
        %63 = make_tensor_view %7, shape = [256, 192], strides = [192, 1] : tensor_view<256x192xbf16, strides=[192,1]>
        %64 = make_partition_view %63 : partition_view<tile=(32x128), padding_value = zero, tensor_view<256x192xbf16, strides=[192,1]>>
        %65, %66 = load_view_tko weak %64[%55, %42] : partition_view<tile=(32x128), padding_value = zero, tensor_view<256x192xbf16, strides=[192,1]>>, tile<i64> -> tile<32x128xbf16>, token
        %67 = mmaf %60, %65, %56 : tile<128x32xbf16>, tile<32x128xbf16>, tile<128x128xf32>
        continue %67 : tile<128x128xf32>
      }
      %69 = ftof %68 : tile<128x128xf32> -> tile<128x128xbf16>
      %70 = ftof %69 : tile<128x128xbf16> -> tile<128x128xf32>
      %71 = constant <f32: 0.7978845834732056> : tile<f32>
      %72 = reshape %71 : tile<f32> -> tile<1x1xf32>
      %73 = broadcast %72 : tile<1x1xf32> -> tile<128x128xf32>
      %74 = constant <f32: 0.044714998453855515> : tile<f32>
      %75 = reshape %74 : tile<f32> -> tile<1x1xf32>
      %76 = broadcast %75 : tile<1x1xf32> -> tile<128x128xf32>
      %77 = mulf %70, %70 : tile<128x128xf32>
      %78 = mulf %77, %70 : tile<128x128xf32>
      %79 = mulf %76, %78 : tile<128x128xf32>
      %80 = addf %70, %79 : tile<128x128xf32>
      %81 = mulf %73, %80 : tile<128x128xf32>
      %82 = tanh %81 : tile<128x128xf32>
      %83 = constant <f32: 1.0> : tile<f32>
      %84 = reshape %83 : tile<f32> -> tile<1x1xf32>
      %85 = broadcast %84 : tile<1x1xf32> -> tile<128x128xf32>
      %86 = constant <f32: 0.5> : tile<f32>
      %87 = reshape %86 : tile<f32> -> tile<1x1xf32>
      %88 = broadcast %87 : tile<1x1xf32> -> tile<128x128xf32>
      %89 = addf %85, %82 : tile<128x128xf32>
      %90 = mulf %88, %70 : tile<128x128xf32>
      %91 = mulf %90, %89 : tile<128x128xf32>
      %92 = ftof %91 : tile<128x128xf32> -> tile<128x128xbf16>
      %93 = make_tensor_view %8, shape = [%3, 192], strides = [192, 1] : tile<i64> -> tensor_view<?x192xbf16, strides=[192,1]>
      %94 = make_partition_view %93 : partition_view<tile=(128x128), tensor_view<?x192xbf16, strides=[192,1]>>
      %95 = store_view_tko weak %92, %94[%29, %42] token = %51 : tile<128x128xbf16>, partition_view<tile=(128x128), tensor_view<?x192xbf16, strides=[192,1]>>, tile<i64> -> token
      continue
    }
    return
  }
}

