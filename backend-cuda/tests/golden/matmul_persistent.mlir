// kernel k0_matmul
cuda_tile.module @tir {
  entry @tir_matmul(%0: tile<ptr<f16>>, %1: tile<ptr<f16>>, %2: tile<ptr<f16>>, %3: tile<i64>, %4: tile<i64>, %5: tile<i64>) {
    %6 = assume div_by<16>, %0 : tile<ptr<f16>>
    %7 = assume div_by<16>, %1 : tile<ptr<f16>>
    %8 = assume div_by<16>, %2 : tile<ptr<f16>>
    %9, %10, %11 = get_tile_block_id : tile<i32>
    %12 = exti %9 unsigned : tile<i32> -> tile<i64>
    %13 = muli %3, %4 : tile<i64>
    %14 = muli %13, %5 : tile<i64>
    %15, %16, %17 = get_num_tile_blocks : tile<i32>
    %18 = exti %15 unsigned : tile<i32> -> tile<i64>
    for %19 in (%12 to %14, step %18) : tile<i64> {
      %20 = muli %4, %5 : tile<i64>
      %21 = divi %19, %20 signed : tile<i64>
      %22 = muli %4, %5 : tile<i64>
      %23 = remi %19, %22 signed : tile<i64>
      %24 = constant <i64: 8> : tile<i64>
      %25 = muli %24, %5 : tile<i64>
      %26 = divi %23, %25 signed : tile<i64>
      %27 = muli %26, %24 : tile<i64>
      %28 = subi %4, %27 : tile<i64>
      %29 = mini %28, %24 signed : tile<i64>
      %30 = remi %23, %25 signed : tile<i64>
      %31 = remi %30, %29 signed : tile<i64>
      %32 = addi %27, %31 : tile<i64>
      %33 = divi %30, %29 signed : tile<i64>
      %34 = muli %4, %5 : tile<i64>
      %35 = remi %19, %34 signed : tile<i64>
      %36 = constant <i64: 8> : tile<i64>
      %37 = muli %36, %5 : tile<i64>
      %38 = divi %35, %37 signed : tile<i64>
      %39 = muli %38, %36 : tile<i64>
      %40 = subi %4, %39 : tile<i64>
      %41 = mini %40, %36 signed : tile<i64>
      %42 = remi %35, %37 signed : tile<i64>
      %43 = remi %42, %41 signed : tile<i64>
      %44 = addi %39, %43 : tile<i64>
      %45 = divi %42, %41 signed : tile<i64>
      %46 = constant <i64: 3> : tile<i64>
      %47 = constant <i64: 1024> : tile<i64>
      %48 = constant <i64: 1536> : tile<i64>
      %49 = constant <i64: 0> : tile<i64>
      %50 = constant <i64: 256> : tile<i64>
      %51 = constant <i64: 31> : tile<i64>
      %52 = constant <i64: 32> : tile<i64>
      %53 = constant <i64: 287> : tile<i64>
      %54 = constant <i64: 8> : tile<i64>
      %55 = constant <i64: 262144> : tile<i64>
      %56 = constant <i64: 1> : tile<i64>
      %57 = constant <i64: 1572864> : tile<i64>
      %58 = make_token : token
      %59 = constant <f32: 0.0> : tile<f32>
      %60 = reshape %59 : tile<f32> -> tile<1x1x1xf32>
      %61 = broadcast %60 : tile<1x1x1xf32> -> tile<1x128x128xf32>
      %93 = for %62 in (%49 to %54, step %56) : tile<i64> iter_values(%63 = %61) -> (tile<1x128x128xf32>) {
        %64 = constant <i64: 0> : tile<i64>
        %65 = make_tensor_view %6, shape = [3, 1024, 256], strides = [262144, 256, 1] : tensor_view<3x1024x256xf16, strides=[262144,256,1]>
        %66 = make_partition_view %65 : partition_view<tile=(1x128x32), padding_value = zero, tensor_view<3x1024x256xf16, strides=[262144,256,1]>>
        %67, %68 = load_view_tko weak %66[%21, %32, %62] : partition_view<tile=(1x128x32), padding_value = zero, tensor_view<3x1024x256xf16, strides=[262144,256,1]>>, tile<i64> -> tile<1x128x32xf16>, token
        %69 = constant <i64: 0> : tile<i64>
        %70 = constant <i64: 393216> : tile<i64>
        %71 = make_tensor_view %7, shape = [1, 256, 1536], strides = [393216, 1536, 1] : tensor_view<1x256x1536xf16, strides=[393216,1536,1]>
        %72 = make_partition_view %71 : partition_view<tile=(1x32x128), padding_value = zero, tensor_view<1x256x1536xf16, strides=[393216,1536,1]>>
        %73, %74 = load_view_tko weak %72[%69, %62, %45] : partition_view<tile=(1x32x128), padding_value = zero, tensor_view<1x256x1536xf16, strides=[393216,1536,1]>>, tile<i64> -> tile<1x32x128xf16>, token
        %75 = constant <i64: 1> : tile<i64>
        %76 = muli %21, %75 : tile<i64>
        %77 = reshape %76 : tile<i64> -> tile<1x1x1xi64>
        %78 = constant <i64: 0> : tile<i64>
        %79 = reshape %78 : tile<i64> -> tile<1x1x1xi64>
        %80 = addi %77, %79 : tile<1x1x1xi64>
        %81 = reshape %46 : tile<i64> -> tile<1x1x1xi64>
        %82 = cmpi less_than %80, %81, signed : tile<1x1x1xi64> -> tile<1x1x1xi1>
        %83 = broadcast %82 : tile<1x1x1xi1> -> tile<1x32x128xi1>
        %84 = constant <f16: 0.0> : tile<f16>
        %85 = reshape %84 : tile<f16> -> tile<1x1x1xf16>
        %86 = broadcast %85 : tile<1x1x1xf16> -> tile<1x32x128xf16>
        %87 = select %83, %73, %86 : tile<1x32x128xi1>, tile<1x32x128xf16>
        %88 = reshape %67 : tile<1x128x32xf16> -> tile<128x32xf16>
        %89 = reshape %87 : tile<1x32x128xf16> -> tile<32x128xf16>
        %90 = reshape %63 : tile<1x128x128xf32> -> tile<128x128xf32>
        %91 = mmaf %88, %89, %90 : tile<128x32xf16>, tile<32x128xf16>, tile<128x128xf32>
        %92 = reshape %91 : tile<128x128xf32> -> tile<1x128x128xf32>
        continue %92 : tile<1x128x128xf32>
      }
      %94 = ftof %93 : tile<1x128x128xf32> -> tile<1x128x128xf16>
      %95 = make_tensor_view %8, shape = [3, 1024, 1536], strides = [1572864, 1536, 1] : tensor_view<3x1024x1536xf16, strides=[1572864,1536,1]>
      %96 = make_partition_view %95 : partition_view<tile=(1x128x128), tensor_view<3x1024x1536xf16, strides=[1572864,1536,1]>>
      %97 = store_view_tko weak %94, %96[%21, %32, %45] token = %58 : tile<1x128x128xf16>, partition_view<tile=(1x128x128), tensor_view<3x1024x1536xf16, strides=[1572864,1536,1]>>, tile<i64> -> token
      continue
    }
    return
  }
}

