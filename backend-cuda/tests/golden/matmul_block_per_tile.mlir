// kernel k0_matmul
cuda_tile.module @tir {
  entry @tir_matmul(%0: tile<ptr<f16>>, %1: tile<ptr<f16>>, %2: tile<ptr<f16>>, %3: tile<i64>, %4: tile<i64>, %5: tile<i64>, %6: tile<i64>) {
    %7 = assume div_by<16>, %0 : tile<ptr<f16>>
    %8 = assume div_by<16>, %1 : tile<ptr<f16>>
    %9 = assume div_by<16>, %2 : tile<ptr<f16>>
    %10, %11, %12 = get_tile_block_id : tile<i32>
    %13 = exti %10 unsigned : tile<i32> -> tile<i64>
    %14 = muli %5, %6 : tile<i64>
    %15 = divi %13, %14 signed : tile<i64>
    %16 = muli %5, %6 : tile<i64>
    %17 = remi %13, %16 signed : tile<i64>
    %18 = constant <i64: 8> : tile<i64>
    %19 = muli %18, %6 : tile<i64>
    %20 = divi %17, %19 signed : tile<i64>
    %21 = muli %20, %18 : tile<i64>
    %22 = subi %5, %21 : tile<i64>
    %23 = mini %22, %18 signed : tile<i64>
    %24 = remi %17, %19 signed : tile<i64>
    %25 = remi %24, %23 signed : tile<i64>
    %26 = addi %21, %25 : tile<i64>
    %27 = divi %24, %23 signed : tile<i64>
    %28 = muli %5, %6 : tile<i64>
    %29 = remi %13, %28 signed : tile<i64>
    %30 = constant <i64: 8> : tile<i64>
    %31 = muli %30, %6 : tile<i64>
    %32 = divi %29, %31 signed : tile<i64>
    %33 = muli %32, %30 : tile<i64>
    %34 = subi %5, %33 : tile<i64>
    %35 = mini %34, %30 signed : tile<i64>
    %36 = remi %29, %31 signed : tile<i64>
    %37 = remi %36, %35 signed : tile<i64>
    %38 = addi %33, %37 : tile<i64>
    %39 = divi %36, %35 signed : tile<i64>
    %40 = constant <i64: 3> : tile<i64>
    %41 = constant <i64: 320> : tile<i64>
    %42 = constant <i64: 256> : tile<i64>
    %43 = constant <i64: 31> : tile<i64>
    %44 = constant <i64: 32> : tile<i64>
    %45 = constant <i64: 287> : tile<i64>
    %46 = constant <i64: 8> : tile<i64>
    %47 = constant <i64: 0> : tile<i64>
    %48 = constant <i64: 1> : tile<i64>
    %49 = constant <i64: 256> : tile<i64>
    %50 = muli %49, %3 : tile<i64>
    %51 = muli %50, %47 : tile<i64>
    %52 = addi %47, %51 : tile<i64>
    %53 = muli %50, %48 : tile<i64>
    %54 = addi %47, %53 : tile<i64>
    %55 = constant <i64: 0> : tile<i64>
    %56 = addi %52, %55 : tile<i64>
    %57 = constant <i64: 256> : tile<i64>
    %58 = constant <i64: 256> : tile<i64>
    %59 = constant <i64: 0> : tile<i64>
    %60 = addi %56, %59 : tile<i64>
    %61 = constant <i64: 1> : tile<i64>
    %62 = constant <i64: 1> : tile<i64>
    %63 = constant <i64: 320> : tile<i64>
    %64 = muli %63, %3 : tile<i64>
    %65 = make_token : token
    %66 = constant <f32: 0.0> : tile<f32>
    %67 = reshape %66 : tile<f32> -> tile<1x1x1xf32>
    %68 = broadcast %67 : tile<1x1x1xf32> -> tile<1x128x128xf32>
    %97 = for %69 in (%47 to %46, step %48) : tile<i64> iter_values(%70 = %68) -> (tile<1x128x128xf32>) {
      %71 = offset %7, %60 : tile<ptr<f16>>, tile<i64> -> tile<ptr<f16>>
      %72 = constant <i64: 0> : tile<i64>
      %73 = make_tensor_view %71, shape = [3, %3, 256], strides = [%54, 256, 1] : tile<i64> -> tensor_view<3x?x256xf16, strides=[?,256,1]>
      %74 = make_partition_view %73 : partition_view<tile=(1x128x32), padding_value = zero, tensor_view<3x?x256xf16, strides=[?,256,1]>>
      %75, %76 = load_view_tko weak %74[%15, %26, %69] : partition_view<tile=(1x128x32), padding_value = zero, tensor_view<3x?x256xf16, strides=[?,256,1]>>, tile<i64> -> tile<1x128x32xf16>, token
      %77 = constant <i64: 0> : tile<i64>
      %78 = constant <i64: 81920> : tile<i64>
      %79 = make_tensor_view %8, shape = [1, 256, 320], strides = [81920, 320, 1] : tensor_view<1x256x320xf16, strides=[81920,320,1]>
      %80 = make_partition_view %79 : partition_view<tile=(1x32x128), padding_value = zero, tensor_view<1x256x320xf16, strides=[81920,320,1]>>
      %81, %82 = load_view_tko weak %80[%77, %69, %39] : partition_view<tile=(1x32x128), padding_value = zero, tensor_view<1x256x320xf16, strides=[81920,320,1]>>, tile<i64> -> tile<1x32x128xf16>, token
      %83 = constant <i64: 1> : tile<i64>
      %84 = muli %15, %83 : tile<i64>
      %85 = reshape %84 : tile<i64> -> tile<1x1x1xi64>
      %86 = constant <i64: 0> : tile<i64>
      %87 = reshape %86 : tile<i64> -> tile<1x1x1xi64>
      %88 = addi %85, %87 : tile<1x1x1xi64>
      %89 = reshape %40 : tile<i64> -> tile<1x1x1xi64>
      %90 = cmpi less_than %88, %89, signed : tile<1x1x1xi64> -> tile<1x1x1xi1>
      %91 = broadcast %90 : tile<1x1x1xi1> -> tile<1x32x128xi1>
      %92 = constant <f16: 0.0> : tile<f16>
      %93 = reshape %92 : tile<f16> -> tile<1x1x1xf16>
      %94 = broadcast %93 : tile<1x1x1xf16> -> tile<1x32x128xf16>
      %95 = select %91, %81, %94 : tile<1x32x128xi1>, tile<1x32x128xf16>
      %96 = mmaf %75, %95, %70 : tile<1x128x32xf16>, tile<1x32x128xf16>, tile<1x128x128xf32>
      continue %96 : tile<1x128x128xf32>
    }
    %98 = ftof %97 : tile<1x128x128xf32> -> tile<1x128x128xf16>
    %99 = make_tensor_view %9, shape = [3, %3, 320], strides = [%64, 320, 1] : tile<i64> -> tensor_view<3x?x320xf16, strides=[?,320,1]>
    %100 = make_partition_view %99 : partition_view<tile=(1x128x128), tensor_view<3x?x320xf16, strides=[?,320,1]>>
    %101 = store_view_tko weak %98, %100[%15, %26, %39] token = %65 : tile<1x128x128xf16>, partition_view<tile=(1x128x128), tensor_view<3x?x320xf16, strides=[?,320,1]>>, tile<i64> -> token
    return
  }
}

