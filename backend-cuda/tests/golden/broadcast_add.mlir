// kernel k0_elementwise
cuda_tile.module @tir {
  entry @tir_elementwise(%0: tile<ptr<f16>>, %1: tile<ptr<f16>>, %2: tile<ptr<f16>>, %3: tile<i64>, %4: tile<i64>, %5: tile<i64>) {
    %6 = assume div_by<16>, %0 : tile<ptr<f16>>
    %7 = assume div_by<16>, %1 : tile<ptr<f16>>
    %8 = assume div_by<16>, %2 : tile<ptr<f16>>
    %9, %10, %11 = get_tile_block_id : tile<i32>
    %12 = exti %9 unsigned : tile<i32> -> tile<i64>
    %13 = divi %12, %5 signed : tile<i64>
    %14 = remi %12, %5 signed : tile<i64>
    %15 = constant <i64: 64> : tile<i64>
    %16 = constant <i64: 0> : tile<i64>
    %17 = constant <i64: 1> : tile<i64>
    %18 = make_token : token
    %19 = constant <i64: 0> : tile<i64>
    %20 = make_tensor_view %6, shape = [%3, 64], strides = [64, 1] : tile<i64> -> tensor_view<?x64xf16, strides=[64,1]>
    %21 = make_partition_view %20 : partition_view<tile=(16x64), padding_value = zero, tensor_view<?x64xf16, strides=[64,1]>>
    %22, %23 = load_view_tko weak %21[%13, %14] : partition_view<tile=(16x64), padding_value = zero, tensor_view<?x64xf16, strides=[64,1]>>, tile<i64> -> tile<16x64xf16>, token
    %24 = constant <i64: 0> : tile<i64>
    %25 = constant <i64: 64> : tile<i64>
    %26 = make_tensor_view %7, shape = [1, 64], strides = [64, 1] : tensor_view<1x64xf16, strides=[64,1]>
    %27 = make_partition_view %26 : partition_view<tile=(1x64), padding_value = zero, tensor_view<1x64xf16, strides=[64,1]>>
    %28, %29 = load_view_tko weak %27[%24, %14] : partition_view<tile=(1x64), padding_value = zero, tensor_view<1x64xf16, strides=[64,1]>>, tile<i64> -> tile<1x64xf16>, token
    %30 = broadcast %28 : tile<1x64xf16> -> tile<16x64xf16>
    %31 = constant <i64: 16> : tile<i64>
    %32 = muli %13, %31 : tile<i64>
    %33 = reshape %32 : tile<i64> -> tile<1x1xi64>
    %34 = broadcast %33 : tile<1x1xi64> -> tile<16x1xi64>
    %35 = iota : tile<16xi64>
    %36 = reshape %35 : tile<16xi64> -> tile<16x1xi64>
    %37 = addi %34, %36 : tile<16x1xi64>
    %38 = reshape %3 : tile<i64> -> tile<1x1xi64>
    %39 = broadcast %38 : tile<1x1xi64> -> tile<16x1xi64>
    %40 = cmpi less_than %37, %39, signed : tile<16x1xi64> -> tile<16x1xi1>
    %41 = broadcast %40 : tile<16x1xi1> -> tile<16x64xi1>
    %42 = constant <f16: 0.0> : tile<f16>
    %43 = reshape %42 : tile<f16> -> tile<1x1xf16>
    %44 = broadcast %43 : tile<1x1xf16> -> tile<16x64xf16>
    %45 = select %41, %30, %44 : tile<16x64xi1>, tile<16x64xf16>
    %46 = addf %22, %45 : tile<16x64xf16>
    %47 = ftof %46 : tile<16x64xf16> -> tile<16x64xf32>
    %48 = constant <f32: 0.0> : tile<f32>
    %49 = reshape %48 : tile<f32> -> tile<1x1xf32>
    %50 = broadcast %49 : tile<1x1xf32> -> tile<16x64xf32>
    %51 = maxf %47, %50 propagate_nan : tile<16x64xf32>
    %52 = ftof %51 : tile<16x64xf32> -> tile<16x64xf16>
    %53 = make_tensor_view %8, shape = [%3, 64], strides = [64, 1] : tile<i64> -> tensor_view<?x64xf16, strides=[64,1]>
    %54 = make_partition_view %53 : partition_view<tile=(16x64), tensor_view<?x64xf16, strides=[64,1]>>
    %55 = store_view_tko weak %52, %54[%13, %14] token = %18 : tile<16x64xf16>, partition_view<tile=(16x64), tensor_view<?x64xf16, strides=[64,1]>>, tile<i64> -> token
    return
  }
  entry @tir_elementwise_dims16(%56: tile<ptr<f16>>, %57: tile<ptr<f16>>, %58: tile<ptr<f16>>, %59: tile<i64>, %60: tile<i64>, %61: tile<i64>) {
    %62 = assume div_by<16>, %56 : tile<ptr<f16>>
    %63 = assume div_by<16>, %57 : tile<ptr<f16>>
    %64 = assume div_by<16>, %58 : tile<ptr<f16>>
    %65, %66, %67 = get_tile_block_id : tile<i32>
    %68 = exti %65 unsigned : tile<i32> -> tile<i64>
    %69 = divi %68, %61 signed : tile<i64>
    %70 = remi %68, %61 signed : tile<i64>
    %71 = assume bounded<0, 2147479552>, %59 : tile<i64>
    %72 = assume div_by<16>, %71 : tile<i64>
    %73 = constant <i64: 64> : tile<i64>
    %74 = constant <i64: 0> : tile<i64>
    %75 = constant <i64: 1> : tile<i64>
    %76 = make_token : token
    %77 = constant <i64: 0> : tile<i64>
    %78 = constant <i64: 0> : tile<i64>
    %79 = constant <i64: 2147479552> : tile<i64>
    %80 = maxi %72, %78 signed : tile<i64>
    %81 = mini %80, %79 signed : tile<i64>
    %82 = assume bounded<0, 2147479552>, %81 : tile<i64>
    %83 = assume div_by<16>, %82 : tile<i64>
    %84 = make_tensor_view %62, shape = [%83, 64], strides = [64, 1] : tile<i64> -> tensor_view<?x64xf16, strides=[64,1]>
    %85 = make_partition_view %84 : partition_view<tile=(16x64), padding_value = zero, tensor_view<?x64xf16, strides=[64,1]>>
    %86, %87 = load_view_tko weak %85[%69, %70] : partition_view<tile=(16x64), padding_value = zero, tensor_view<?x64xf16, strides=[64,1]>>, tile<i64> -> tile<16x64xf16>, token
    %88 = constant <i64: 0> : tile<i64>
    %89 = constant <i64: 64> : tile<i64>
    %90 = make_tensor_view %63, shape = [1, 64], strides = [64, 1] : tensor_view<1x64xf16, strides=[64,1]>
    %91 = make_partition_view %90 : partition_view<tile=(1x64), padding_value = zero, tensor_view<1x64xf16, strides=[64,1]>>
    %92, %93 = load_view_tko weak %91[%88, %70] : partition_view<tile=(1x64), padding_value = zero, tensor_view<1x64xf16, strides=[64,1]>>, tile<i64> -> tile<1x64xf16>, token
    %94 = broadcast %92 : tile<1x64xf16> -> tile<16x64xf16>
    %95 = constant <i64: 16> : tile<i64>
    %96 = muli %69, %95 : tile<i64>
    %97 = reshape %96 : tile<i64> -> tile<1x1xi64>
    %98 = broadcast %97 : tile<1x1xi64> -> tile<16x1xi64>
    %99 = iota : tile<16xi64>
    %100 = reshape %99 : tile<16xi64> -> tile<16x1xi64>
    %101 = addi %98, %100 : tile<16x1xi64>
    %102 = reshape %72 : tile<i64> -> tile<1x1xi64>
    %103 = broadcast %102 : tile<1x1xi64> -> tile<16x1xi64>
    %104 = cmpi less_than %101, %103, signed : tile<16x1xi64> -> tile<16x1xi1>
    %105 = broadcast %104 : tile<16x1xi1> -> tile<16x64xi1>
    %106 = constant <f16: 0.0> : tile<f16>
    %107 = reshape %106 : tile<f16> -> tile<1x1xf16>
    %108 = broadcast %107 : tile<1x1xf16> -> tile<16x64xf16>
    %109 = select %105, %94, %108 : tile<16x64xi1>, tile<16x64xf16>
    %110 = addf %86, %109 : tile<16x64xf16>
    %111 = ftof %110 : tile<16x64xf16> -> tile<16x64xf32>
    %112 = constant <f32: 0.0> : tile<f32>
    %113 = reshape %112 : tile<f32> -> tile<1x1xf32>
    %114 = broadcast %113 : tile<1x1xf32> -> tile<16x64xf32>
    %115 = maxf %111, %114 propagate_nan : tile<16x64xf32>
    %116 = ftof %115 : tile<16x64xf32> -> tile<16x64xf16>
    %117 = constant <i64: 0> : tile<i64>
    %118 = constant <i64: 2147479552> : tile<i64>
    %119 = maxi %72, %117 signed : tile<i64>
    %120 = mini %119, %118 signed : tile<i64>
    %121 = assume bounded<0, 2147479552>, %120 : tile<i64>
    %122 = assume div_by<16>, %121 : tile<i64>
    %123 = make_tensor_view %64, shape = [%122, 64], strides = [64, 1] : tile<i64> -> tensor_view<?x64xf16, strides=[64,1]>
    %124 = make_partition_view %123 : partition_view<tile=(16x64), tensor_view<?x64xf16, strides=[64,1]>>
    %125 = store_view_tko weak %116, %124[%69, %70] token = %76 : tile<16x64xf16>, partition_view<tile=(16x64), tensor_view<?x64xf16, strides=[64,1]>>, tile<i64> -> token
    return
  }
}

