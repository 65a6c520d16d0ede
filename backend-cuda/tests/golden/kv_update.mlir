// kernel k0_state_update
cuda_tile.module @tir {
  entry @tir_state_update(%0: tile<ptr<i64>>, %1: tile<ptr<f16>>, %2: tile<ptr<f16>>, %3: tile<i64>, %4: tile<i64>, %5: tile<i64>) {
    %6 = assume div_by<16>, %0 : tile<ptr<i64>>
    %7 = assume div_by<16>, %1 : tile<ptr<f16>>
    %8 = assume div_by<16>, %2 : tile<ptr<f16>>
    %9, %10, %11 = get_tile_block_id : tile<i32>
    %12 = exti %9 unsigned : tile<i32> -> tile<i64>
    %13 = muli %4, %5 : tile<i64>
    %14 = divi %12, %13 signed : tile<i64>
    %15 = divi %12, %5 signed : tile<i64>
    %16 = remi %15, %4 signed : tile<i64>
    %17 = remi %12, %5 signed : tile<i64>
    %18 = constant <i64: 4> : tile<i64>
    %19 = constant <i64: 1> : tile<i64>
    %20 = constant <i64: 8> : tile<i64>
    %21 = constant <i64: 0> : tile<i64>
    %22 = constant <i64: 8> : tile<i64>
    %23 = constant <i64: 16> : tile<i64>
    %24 = constant <i64: 128> : tile<i64>
    %25 = make_token : token
    %26 = constant <i64: 0> : tile<i64>
    %27 = make_tensor_view %8, shape = [4, 1, 8], strides = [8, 8, 1] : tensor_view<4x1x8xf16, strides=[8,8,1]>
    %28 = make_partition_view %27 : partition_view<tile=(4x1x8), padding_value = zero, tensor_view<4x1x8xf16, strides=[8,8,1]>>
    %29, %30 = load_view_tko weak %28[%14, %16, %17] optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : partition_view<tile=(4x1x8), padding_value = zero, tensor_view<4x1x8xf16, strides=[8,8,1]>>, tile<i64> -> tile<4x1x8xf16>, token
    %31 = offset %6, %21 : tile<ptr<i64>>, tile<i64> -> tile<ptr<i64>>
    %32, %33 = load_ptr_tko weak %31 : tile<ptr<i64>> -> tile<i64>, token
    %34 = muli %32, %22 : tile<i64>
    %35 = offset %7, %34 : tile<ptr<f16>>, tile<i64> -> tile<ptr<f16>>
    %36 = make_tensor_view %35, shape = [4, 1, 8], strides = [128, 8, 1] : tensor_view<4x1x8xf16, strides=[128,8,1]>
    %37 = make_partition_view %36 : partition_view<tile=(4x1x8), tensor_view<4x1x8xf16, strides=[128,8,1]>>
    %38 = store_view_tko weak %29, %37[%14, %16, %17] token = %25 optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : tile<4x1x8xf16>, partition_view<tile=(4x1x8), tensor_view<4x1x8xf16, strides=[128,8,1]>>, tile<i64> -> token
    return
  }
}

// kernel k1_reduction
cuda_tile.module @tir {
  entry @tir_reduction(%0: tile<ptr<f16>>, %1: tile<ptr<f16>>, %2: tile<i64>, %3: tile<i64>) {
    %4 = assume div_by<16>, %0 : tile<ptr<f16>>
    %5 = assume div_by<16>, %1 : tile<ptr<f16>>
    %6, %7, %8 = get_tile_block_id : tile<i32>
    %9 = exti %6 unsigned : tile<i32> -> tile<i64>
    %10 = divi %9, %3 signed : tile<i64>
    %11 = remi %9, %3 signed : tile<i64>
    %12 = constant <i64: 4> : tile<i64>
    %13 = constant <i64: 8> : tile<i64>
    %14 = constant <i64: 1> : tile<i64>
    %15 = constant <i64: 16> : tile<i64>
    %16 = constant <i64: 16> : tile<i64>
    %17 = constant <i64: 15> : tile<i64>
    %18 = constant <i64: 31> : tile<i64>
    %19 = constant <i64: 1> : tile<i64>
    %20 = constant <i64: 0> : tile<i64>
    %21 = constant <i64: 8> : tile<i64>
    %22 = constant <i64: 128> : tile<i64>
    %23 = muli %10, %12 : tile<i64>
    %24 = muli %11, %13 : tile<i64>
    %25 = make_token : token
    %26 = constant <f32: 0.0> : tile<f32>
    %27 = reshape %26 : tile<f32> -> tile<1x1xf32>
    %28 = broadcast %27 : tile<1x1xf32> -> tile<4x8xf32>
    %154 = for %29 in (%20 to %19, step %14) : tile<i64> iter_values(%30 = %28) -> (tile<4x8xf32>) {
      %31 = reshape %20 : tile<i64> -> tile<1x1x1xi64>
      %32 = broadcast %31 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %33 = muli %29, %15 : tile<i64>
      %34 = reshape %33 : tile<i64> -> tile<1x1x1xi64>
      %35 = broadcast %34 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %36 = iota : tile<16xi64>
      %37 = reshape %36 : tile<16xi64> -> tile<1x1x16xi64>
      %38 = broadcast %37 : tile<1x1x16xi64> -> tile<4x8x16xi64>
      %39 = addi %35, %38 : tile<4x8x16xi64>
      %40 = reshape %14 : tile<i64> -> tile<1x1x1xi64>
      %41 = broadcast %40 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %42 = muli %39, %41 : tile<4x8x16xi64>
      %43 = addi %32, %42 : tile<4x8x16xi64>
      %44 = reshape %14 : tile<i64> -> tile<1x1x1xi64>
      %45 = broadcast %44 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %46 = divi %43, %45 signed : tile<4x8x16xi64>
      %47 = reshape %15 : tile<i64> -> tile<1x1x1xi64>
      %48 = broadcast %47 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %49 = remi %46, %48 signed : tile<4x8x16xi64>
      %50 = reshape %20 : tile<i64> -> tile<1x1x1xi64>
      %51 = broadcast %50 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %52 = reshape %23 : tile<i64> -> tile<1x1x1xi64>
      %53 = broadcast %52 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %54 = iota : tile<4xi64>
      %55 = reshape %54 : tile<4xi64> -> tile<4x1x1xi64>
      %56 = broadcast %55 : tile<4x1x1xi64> -> tile<4x8x16xi64>
      %57 = addi %53, %56 : tile<4x8x16xi64>
      %58 = reshape %14 : tile<i64> -> tile<1x1x1xi64>
      %59 = broadcast %58 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %60 = muli %57, %59 : tile<4x8x16xi64>
      %61 = addi %51, %60 : tile<4x8x16xi64>
      %62 = reshape %20 : tile<i64> -> tile<1x1x1xi64>
      %63 = broadcast %62 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %64 = reshape %24 : tile<i64> -> tile<1x1x1xi64>
      %65 = broadcast %64 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %66 = iota : tile<8xi64>
      %67 = reshape %66 : tile<8xi64> -> tile<1x8x1xi64>
      %68 = broadcast %67 : tile<1x8x1xi64> -> tile<4x8x16xi64>
      %69 = addi %65, %68 : tile<4x8x16xi64>
      %70 = reshape %14 : tile<i64> -> tile<1x1x1xi64>
      %71 = broadcast %70 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %72 = muli %69, %71 : tile<4x8x16xi64>
      %73 = addi %63, %72 : tile<4x8x16xi64>
      %74 = constant <i1: 1> : tile<i1>
      %75 = reshape %74 : tile<i1> -> tile<1x1x1xi1>
      %76 = broadcast %75 : tile<1x1x1xi1> -> tile<4x8x16xi1>
      %77 = constant <i64: 0> : tile<i64>
      %78 = reshape %77 : tile<i64> -> tile<1x1x1xi64>
      %79 = broadcast %78 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %80 = reshape %12 : tile<i64> -> tile<1x1x1xi64>
      %81 = broadcast %80 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %82 = cmpi greater_than_or_equal %61, %79, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %83 = cmpi less_than %61, %81, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %84 = andi %82, %83 : tile<4x8x16xi1>
      %85 = andi %76, %84 : tile<4x8x16xi1>
      %86 = reshape %22 : tile<i64> -> tile<1x1x1xi64>
      %87 = broadcast %86 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %88 = muli %61, %87 : tile<4x8x16xi64>
      %89 = constant <i64: 0> : tile<i64>
      %90 = reshape %89 : tile<i64> -> tile<1x1x1xi64>
      %91 = broadcast %90 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %92 = reshape %15 : tile<i64> -> tile<1x1x1xi64>
      %93 = broadcast %92 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %94 = cmpi greater_than_or_equal %49, %91, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %95 = cmpi less_than %49, %93, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %96 = andi %94, %95 : tile<4x8x16xi1>
      %97 = andi %85, %96 : tile<4x8x16xi1>
      %98 = reshape %21 : tile<i64> -> tile<1x1x1xi64>
      %99 = broadcast %98 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %100 = muli %49, %99 : tile<4x8x16xi64>
      %101 = addi %88, %100 : tile<4x8x16xi64>
      %102 = constant <i64: 0> : tile<i64>
      %103 = reshape %102 : tile<i64> -> tile<1x1x1xi64>
      %104 = broadcast %103 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %105 = reshape %13 : tile<i64> -> tile<1x1x1xi64>
      %106 = broadcast %105 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %107 = cmpi greater_than_or_equal %73, %104, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %108 = cmpi less_than %73, %106, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %109 = andi %107, %108 : tile<4x8x16xi1>
      %110 = andi %97, %109 : tile<4x8x16xi1>
      %111 = reshape %14 : tile<i64> -> tile<1x1x1xi64>
      %112 = broadcast %111 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %113 = muli %73, %112 : tile<4x8x16xi64>
      %114 = addi %101, %113 : tile<4x8x16xi64>
      %115 = constant <i64: 0> : tile<i64>
      %116 = reshape %115 : tile<i64> -> tile<1x1x1xi64>
      %117 = broadcast %116 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %118 = select %110, %114, %117 : tile<4x8x16xi1>, tile<4x8x16xi64>
      %119 = reshape %4 : tile<ptr<f16>> -> tile<1x1x1xptr<f16>>
      %120 = broadcast %119 : tile<1x1x1xptr<f16>> -> tile<4x8x16xptr<f16>>
      %121 = offset %120, %118 : tile<4x8x16xptr<f16>>, tile<4x8x16xi64> -> tile<4x8x16xptr<f16>>
      %122 = constant <f16: 0.0> : tile<f16>
      %123 = reshape %122 : tile<f16> -> tile<1x1x1xf16>
      %124 = broadcast %123 : tile<1x1x1xf16> -> tile<4x8x16xf16>
      %125, %126 = load_ptr_tko weak %121, %110, %124 : tile<4x8x16xptr<f16>>, tile<4x8x16xi1>, tile<4x8x16xf16> -> tile<4x8x16xf16>, token
      %127 = reshape %20 : tile<i64> -> tile<1x1x1xi64>
      %128 = broadcast %127 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %129 = reshape %14 : tile<i64> -> tile<1x1x1xi64>
      %130 = broadcast %129 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %131 = muli %39, %130 : tile<4x8x16xi64>
      %132 = addi %128, %131 : tile<4x8x16xi64>
      %133 = reshape %20 : tile<i64> -> tile<1x1x1xi64>
      %134 = broadcast %133 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %135 = reshape %16 : tile<i64> -> tile<1x1x1xi64>
      %136 = broadcast %135 : tile<1x1x1xi64> -> tile<4x8x16xi64>
      %137 = cmpi greater_than_or_equal %132, %134, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %138 = cmpi less_than %132, %136, signed : tile<4x8x16xi64> -> tile<4x8x16xi1>
      %139 = andi %137, %138 : tile<4x8x16xi1>
      %140 = constant <f16: 0.0> : tile<f16>
      %141 = reshape %140 : tile<f16> -> tile<1x1x1xf16>
      %142 = broadcast %141 : tile<1x1x1xf16> -> tile<4x8x16xf16>
      %143 = select %139, %125, %142 : tile<4x8x16xi1>, tile<4x8x16xf16>
      %144 = ftof %143 : tile<4x8x16xf16> -> tile<4x8x16xf32>
      %148 = reduce %144 dim=2 identities=[0] : tile<4x8x16xf32> -> tile<4x8xf32> {
      ^bb0(%145: tile<f32>, %146: tile<f32>):
        %147 = addf %145, %146 : tile<f32>
        yield %147 : tile<f32>
      }
      %149 = reshape %148 : tile<4x8xf32> -> tile<4x8x1xf32>
      %150 = ftof %149 : tile<4x8x1xf32> -> tile<4x8x1xf16>
      %151 = reshape %150 : tile<4x8x1xf16> -> tile<4x8xf16>
      %152 = ftof %151 : tile<4x8xf16> -> tile<4x8xf32>
      %153 = addf %30, %152 : tile<4x8xf32>
      continue %153 : tile<4x8xf32>
    }
    %155 = ftof %154 : tile<4x8xf32> -> tile<4x8xf16>
    %156 = make_tensor_view %5, shape = [4, 8], strides = [8, 1] : tensor_view<4x8xf16, strides=[8,1]>
    %157 = make_partition_view %156 : partition_view<tile=(4x8), tensor_view<4x8xf16, strides=[8,1]>>
    %158 = store_view_tko weak %155, %157[%10, %11] token = %25 optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : tile<4x8xf16>, partition_view<tile=(4x8), tensor_view<4x8xf16, strides=[8,1]>>, tile<i64> -> token
    return
  }
}

