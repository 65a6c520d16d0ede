// kernel k0_state_update
cuda_tile.module @tir {
  entry @tir_state_update(%0: tile<ptr<i64>>, %1: tile<ptr<f16>>, %2: tile<ptr<f16>>, %3: tile<i64>, %4: tile<i64>, %5: tile<i64>) {
    %6, %7, %8 = get_tile_block_id : tile<i32>
    %9 = exti %6 unsigned : tile<i32> -> tile<i64>
    %10 = muli %4, %5 : tile<i64>
    %11 = divi %9, %10 signed : tile<i64>
    %12 = divi %9, %5 signed : tile<i64>
    %13 = remi %12, %4 signed : tile<i64>
    %14 = remi %9, %5 signed : tile<i64>
    %15 = constant <i64: 4> : tile<i64>
    %16 = constant <i64: 1> : tile<i64>
    %17 = constant <i64: 8> : tile<i64>
    %18 = constant <i64: 0> : tile<i64>
    %19 = constant <i64: 8> : tile<i64>
    %20 = constant <i64: 16> : tile<i64>
    %21 = constant <i64: 128> : tile<i64>
    %22 = make_token : token
    %23 = constant <i64: 0> : tile<i64>
    %24 = make_tensor_view %2, shape = [4, 1, 8], strides = [8, 8, 1] : tensor_view<4x1x8xf16, strides=[8,8,1]>
    %25 = make_partition_view %24 : partition_view<tile=(4x1x8), padding_value = zero, tensor_view<4x1x8xf16, strides=[8,8,1]>>
    %26, %27 = load_view_tko weak %25[%11, %13, %14] : partition_view<tile=(4x1x8), padding_value = zero, tensor_view<4x1x8xf16, strides=[8,8,1]>>, tile<i64> -> tile<4x1x8xf16>, token
    %28 = offset %0, %18 : tile<ptr<i64>>, tile<i64> -> tile<ptr<i64>>
    %29, %30 = load_ptr_tko weak %28 : tile<ptr<i64>> -> tile<i64>, token
    %31 = muli %29, %19 : tile<i64>
    %32 = offset %1, %31 : tile<ptr<f16>>, tile<i64> -> tile<ptr<f16>>
    %33 = make_tensor_view %32, shape = [4, 1, 8], strides = [128, 8, 1] : tensor_view<4x1x8xf16, strides=[128,8,1]>
    %34 = make_partition_view %33 : partition_view<tile=(4x1x8), tensor_view<4x1x8xf16, strides=[128,8,1]>>
    %35 = store_view_tko weak %26, %34[%11, %13, %14] token = %22 : tile<4x1x8xf16>, partition_view<tile=(4x1x8), tensor_view<4x1x8xf16, strides=[128,8,1]>>, tile<i64> -> token
    return
  }
}

// kernel k1_reduction
cuda_tile.module @tir {
  entry @tir_reduction(%0: tile<ptr<f16>>, %1: tile<ptr<f16>>, %2: tile<i64>, %3: tile<i64>) {
    %4, %5, %6 = get_tile_block_id : tile<i32>
    %7 = exti %4 unsigned : tile<i32> -> tile<i64>
    %8 = divi %7, %3 signed : tile<i64>
    %9 = remi %7, %3 signed : tile<i64>
    %10 = constant <i64: 4> : tile<i64>
    %11 = constant <i64: 8> : tile<i64>
    %12 = constant <i64: 1> : tile<i64>
    %13 = constant <i64: 16> : tile<i64>
    %14 = constant <i64: 16> : tile<i64>
    %15 = constant <i64: 15> : tile<i64>
    %16 = constant <i64: 31> : tile<i64>
    %17 = constant <i64: 1> : tile<i64>
    %18 = constant <i64: 0> : tile<i64>
    %19 = constant <i64: 8> : tile<i64>
    %20 = constant <i64: 128> : tile<i64>
    %21 = muli %8, %10 : tile<i64>
    %22 = muli %9, %11 : tile<i64>
    %23 = make_token : token
    %24 = constant <f32: 0.0> : tile<f32>
    %25 = reshape %24 : tile<f32> -> tile<1x1xf32>
    %26 = broadcast %25 : tile<1x1xf32> -> tile<4x8xf32>
    %152 = for %27 in (%18 to %17, step %12) : tile<i64> iter_values(%28 = %26) -> (tile<4x8xf32>) {
      %29 = reshape %18 : tile<i64> -> tile<1x1x1xi64>
      %30 = broadcast %29 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %31 = muli %27, %13 : tile<i64>
      %32 = reshape %31 : tile<i64> -> tile<1x1x1xi64>
      %33 = broadcast %32 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %34 = iota : tile<16xi64>
      %35 = reshape %34 : tile<16xi64> -> tile<1x1x16xi64>
      %36 = broadcast %35 : tile<1x1x16xi64> -> tile<4x8x16xi64>
      %37 = addi %33, %36 : tile<4x8x16xi64>
      %38 = reshape %12 : tile<i64> -> tile<1x1x1xi64>
      %39 = broadcast %38 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %40 = muli %37, %39 : tile<4x8x16xi64>
      %41 = addi %30, %40 : tile<4x8x16xi64>
      %42 = reshape %12 : tile<i64> -> tile<1x1x1xi64>
      %43 = broadcast %42 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %44 = divi %41, %43 signed : tile<4x8x16xi64>
      %45 = reshape %13 : tile<i64> -> tile<1x1x1xi64>
      %46 = broadcast %45 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %47 = remi %44, %46 signed : tile<4x8x16xi64>
      %48 = reshape %18 : tile<i64> -> tile<1x1x1xi64>
      %49 = broadcast %48 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %50 = reshape %21 : tile<i64> -> tile<1x1x1xi64>
      %51 = broadcast %50 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %52 = iota : tile<4xi64>
      %53 = reshape %52 : tile<4xi64> -> tile<4x1x1xi64>
      %54 = broadcast %53 : tile<4x1x1xi64> -> tile<4x8x16xi64>
      %55 = addi %51, %54 : tile<4x8x16xi64>
      %56 = reshape %12 : tile<i64> -> tile<1x1x1xi64>
      %57 = broadcast %56 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %58 = muli %55, %57 : tile<4x8x16xi64>
      %59 = addi %49, %58 : tile<4x8x16xi64>
      %60 = reshape %18 : tile<i64> -> tile<1x1x1xi64>
      %61 = broadcast %60 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %62 = reshape %22 : tile<i64> -> tile<1x1x1xi64>
      %63 = broadcast %62 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %64 = iota : tile<8xi64>
      %65 = reshape %64 : tile<8xi64> -> tile<1x8x1xi64>
      %66 = broadcast %65 : tile<1x8x1xi64> -> tile<4x8x16xi64>
      %67 = addi %63, %66 : tile<4x8x16xi64>
      %68 = reshape %12 : tile<i64> -> tile<1x1x1xi64>
      %69 = broadcast %68 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %70 = muli %67, %69 : tile<4x8x16xi64>
      %71 = addi %61, %70 : tile<4x8x16xi64>
      %72 = constant <i1: 1> : tile<i1>
      %73 = reshape %72 : tile<i1> -> tile<1x1x1xi1>
      %74 = broadcast %73 : tile<1x1x1xi1> -> tile<4x8x16xi1>
      %75 = constant <i64: 0> : tile<i64>
      %76 = reshape %75 : tile<i64> -> tile<1x1x1xi64>
      %77 = broadcast %76 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %78 = reshape %10 : tile<i64> -> tile<1x1x1xi64>
      %79 = broadcast %78 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %80 = cmpi greater_than_or_equal %59, %77, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %81 = cmpi less_than %59, %79, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %82 = andi %80, %81 : tile<4x8x16xi1>
      %83 = andi %74, %82 : tile<4x8x16xi1>
      %84 = reshape %20 : tile<i64> -> tile<1x1x1xi64>
      %85 = broadcast %84 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %86 = muli %59, %85 : tile<4x8x16xi64>
      %87 = constant <i64: 0> : tile<i64>
      %88 = reshape %87 : tile<i64> -> tile<1x1x1xi64>
      %89 = broadcast %88 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %90 = reshape %13 : tile<i64> -> tile<1x1x1xi64>
      %91 = broadcast %90 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %92 = cmpi greater_than_or_equal %47, %89, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %93 = cmpi less_than %47, %91, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %94 = andi %92, %93 : tile<4x8x16xi1>
      %95 = andi %83, %94 : tile<4x8x16xi1>
      %96 = reshape %19 : tile<i64> -> tile<1x1x1xi64>
      %97 = broadcast %96 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %98 = muli %47, %97 : tile<4x8x16xi64>
      %99 = addi %86, %98 : tile<4x8x16xi64>
      %100 = constant <i64: 0> : tile<i64>
      %101 = reshape %100 : tile<i64> -> tile<1x1x1xi64>
      %102 = broadcast %101 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %103 = reshape %11 : tile<i64> -> tile<1x1x1xi64>
      %104 = broadcast %103 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %105 = cmpi greater_than_or_equal %71, %102, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %106 = cmpi less_than %71, %104, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %107 = andi %105, %106 : tile<4x8x16xi1>
      %108 = andi %95, %107 : tile<4x8x16xi1>
      %109 = reshape %12 : tile<i64> -> tile<1x1x1xi64>
      %110 = broadcast %109 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %111 = muli %71, %110 : tile<4x8x16xi64>
      %112 = addi %99, %111 : tile<4x8x16xi64>
      %113 = constant <i64: 0> : tile<i64>
      %114 = reshape %113 : tile<i64> -> tile<1x1x1xi64>
      %115 = broadcast %114 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %116 = select %108, %112, %115 : tile<4x8x16xi1>, tile<4x8x16xi64>
      %117 = reshape %0 : tile<ptr<f16>> -> tile<1x1x1xptr<f16>>
      %118 = broadcast %117 : tile<1x1x1xptr<f16>> -> tile<4x8x16xptr<f16>>
      %119 = offset %118, %116 : tile<4x8x16xptr<f16>>, tile<4x8x16xi64> -> tile<4x8x16xptr<f16>>
      %120 = constant <f16: 0.0> : tile<f16>
      %121 = reshape %120 : tile<f16> -> tile<1x1x1xf16>
      %122 = broadcast %121 : tile<1x1x1xf16> -> tile<4x8x16xf16>
      %123, %124 = load_ptr_tko weak %119, %108, %122 : tile<4x8x16xptr<f16>>, tile<4x8x16xi1>, tile<4x8x16xf16> -> tile<4x8x16xf16>, token
      %125 = reshape %18 : tile<i64> -> tile<1x1x1xi64>
      %126 = broadcast %125 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %127 = reshape %12 : tile<i64> -> tile<1x1x1xi64>
      %128 = broadcast %127 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %129 = muli %37, %128 : tile<4x8x16xi64>
      %130 = addi %126, %129 : tile<4x8x16xi64>
      %131 = reshape %18 : tile<i64> -> tile<1x1x1xi64>
      %132 = broadcast %131 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %133 = reshape %14 : tile<i64> -> tile<1x1x1xi64>
      %134 = broadcast %133 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %135 = cmpi greater_than_or_equal %130, %132, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %136 = cmpi less_than %130, %134, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %137 = andi %135, %136 : tile<4x8x16xi1>
      %138 = constant <f16: 0.0> : tile<f16>
      %139 = reshape %138 : tile<f16> -> tile<1x1x1xf16>
      %140 = broadcast %139 : tile<1x1x1xf16> -> tile<4x8x16xf16>
      %141 = select %137, %123, %140 : tile<4x8x16xi1>, tile<4x8x16xf16>
      %142 = ftof %141 : tile<4x8x16xf16> -> tile<4x8x16xf32>
      %146 = reduce %142 dim=2 identities=[0] : tile<4x8x16xf32> -> tile<4x8xf32> {
      ^bb0(%143: tile<f32>, %144: tile<f32>):
        %145 = addf %143, %144 : tile<f32>
        yield %145 : tile<f32>
      }
      %147 = reshape %146 : tile<4x8xf32> -> tile<4x8x1xf32>
      %148 = ftof %147 : tile<4x8x1xf32> -> tile<4x8x1xf16>
      %149 = reshape %148 : tile<4x8x1xf16> -> tile<4x8xf16>
      %150 = ftof %149 : tile<4x8xf16> -> tile<4x8xf32>
      %151 = addf %28, %150 : tile<4x8xf32>
      continue %151 : tile<4x8xf32>
    }
    %153 = ftof %152 : tile<4x8xf32> -> tile<4x8xf16>
    %154 = make_tensor_view %1, shape = [4, 8], strides = [8, 1] : tensor_view<4x8xf16, strides=[8,1]>
    %155 = make_partition_view %154 : partition_view<tile=(4x8), tensor_view<4x8xf16, strides=[8,1]>>
    %156 = store_view_tko weak %153, %155[%8, %9] token = %23 : tile<4x8xf16>, partition_view<tile=(4x8), tensor_view<4x8xf16, strides=[8,1]>>, tile<i64> -> token
    return
  }
}

