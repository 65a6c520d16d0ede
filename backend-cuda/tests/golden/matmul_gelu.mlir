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
  entry @tir_matmul_dims16(%90: tile<ptr<bf16>>, %91: tile<ptr<bf16>>, %92: tile<ptr<bf16>>, %93: tile<i64>, %94: tile<i64>, %95: tile<i64>) {
    %96 = assume div_by<16>, %90 : tile<ptr<bf16>>
    %97 = assume div_by<16>, %91 : tile<ptr<bf16>>
    %98 = assume div_by<16>, %92 : tile<ptr<bf16>>
    %99, %100, %101 = get_tile_block_id : tile<i32>
    %102 = exti %99 unsigned : tile<i32> -> tile<i64>
    %103 = muli %94, %95 : tile<i64>
    %104 = remi %102, %103 signed : tile<i64>
    %105 = constant <i64: 8> : tile<i64>
    %106 = muli %105, %95 : tile<i64>
    %107 = divi %104, %106 signed : tile<i64>
    %108 = muli %107, %105 : tile<i64>
    %109 = subi %94, %108 : tile<i64>
    %110 = mini %109, %105 signed : tile<i64>
    %111 = remi %104, %106 signed : tile<i64>
    %112 = remi %111, %110 signed : tile<i64>
    %113 = addi %108, %112 : tile<i64>
    %114 = divi %111, %110 signed : tile<i64>
    %115 = muli %94, %95 : tile<i64>
    %116 = remi %102, %115 signed : tile<i64>
    %117 = constant <i64: 8> : tile<i64>
    %118 = muli %117, %95 : tile<i64>
    %119 = divi %116, %118 signed : tile<i64>
    %120 = muli %119, %117 : tile<i64>
    %121 = subi %94, %120 : tile<i64>
    %122 = mini %121, %117 signed : tile<i64>
    %123 = remi %116, %118 signed : tile<i64>
    %124 = remi %123, %122 signed : tile<i64>
    %125 = addi %120, %124 : tile<i64>
    %126 = divi %123, %122 signed : tile<i64>
    %127 = assume bounded<0, 2147479552>, %93 : tile<i64>
    %128 = assume div_by<16>, %127 : tile<i64>
    %129 = constant <i64: 192> : tile<i64>
    %130 = constant <i64: 0> : tile<i64>
    %131 = constant <i64: 256> : tile<i64>
    %132 = constant <i64: 31> : tile<i64>
    %133 = constant <i64: 32> : tile<i64>
    %134 = constant <i64: 287> : tile<i64>
    %135 = constant <i64: 8> : tile<i64>
    %136 = constant <i64: 1> : tile<i64>
    %137 = make_token : token
    %138 = constant <f32: 0.0> : tile<f32>
    %139 = reshape %138 : tile<f32> -> tile<1x1xf32>
    %140 = broadcast %139 : tile<1x1xf32> -> tile<128x128xf32>
    %160 = for %141 in (%130 to %135, step %136) : tile<i64> iter_values(%142 = %140) -> (tile<128x128xf32>) {
      %143 = constant <i64: 0> : tile<i64>
      %144 = constant <i64: 0> : tile<i64>
      %145 = constant <i64: 2147479552> : tile<i64>
      %146 = maxi %128, %144 signed : tile<i64>
      %147 = mini %146, %145 signed : tile<i64>
      %148 = assume bounded<0, 2147479552>, %147 : tile<i64>
      %149 = assume div_by<16>, %148 : tile<i64>
      %150 = make_tensor_view %96, shape = [%149, 256], strides = [256, 1] : tile<i64> -> tensor_view<?x256xbf16, strides=[256,1]>
      %151 = make_partition_view %150 : partition_view<tile=(128x32), padding_value = zero, tensor_view<?x256xbf16, strides=[256,1]>>
      %152, %153 = load_view_tko weak %151[%113, %141] : partition_view<tile=(128x32), padding_value = zero, tensor_view<?x256xbf16, strides=[256,1]>>, tile<i64> -> tile<128x32xbf16>, token
      %154 = constant <i64: 0> : tile<i64>
      %155 = make_tensor_view %97, shape = [256, 192], strides = [192, 1] : tensor_view<256x192xbf16, strides=[192,1]>
      %156 = make_partition_view %155 : partition_view<tile=(32x128), padding_value = zero, tensor_view<256x192xbf16, strides=[192,1]>>
      %157, %158 = load_view_tko weak %156[%141, %126] : partition_view<tile=(32x128), padding_value = zero, tensor_view<256x192xbf16, strides=[192,1]>>, tile<i64> -> tile<32x128xbf16>, token
      %159 = mmaf %152, %157, %142 : tile<128x32xbf16>, tile<32x128xbf16>, tile<128x128xf32>
      continue %159 : tile<128x128xf32>
    }
    %161 = ftof %160 : tile<128x128xf32> -> tile<128x128xbf16>
    %162 = ftof %161 : tile<128x128xbf16> -> tile<128x128xf32>
    %163 = constant <f32: 0.7978845834732056> : tile<f32>
    %164 = reshape %163 : tile<f32> -> tile<1x1xf32>
    %165 = broadcast %164 : tile<1x1xf32> -> tile<128x128xf32>
    %166 = constant <f32: 0.044714998453855515> : tile<f32>
    %167 = reshape %166 : tile<f32> -> tile<1x1xf32>
    %168 = broadcast %167 : tile<1x1xf32> -> tile<128x128xf32>
    %169 = mulf %162, %162 : tile<128x128xf32>
    %170 = mulf %169, %162 : tile<128x128xf32>
    %171 = mulf %168, %170 : tile<128x128xf32>
    %172 = addf %162, %171 : tile<128x128xf32>
    %173 = mulf %165, %172 : tile<128x128xf32>
    %174 = tanh %173 : tile<128x128xf32>
    %175 = constant <f32: 1.0> : tile<f32>
    %176 = reshape %175 : tile<f32> -> tile<1x1xf32>
    %177 = broadcast %176 : tile<1x1xf32> -> tile<128x128xf32>
    %178 = constant <f32: 0.5> : tile<f32>
    %179 = reshape %178 : tile<f32> -> tile<1x1xf32>
    %180 = broadcast %179 : tile<1x1xf32> -> tile<128x128xf32>
    %181 = addf %177, %174 : tile<128x128xf32>
    %182 = mulf %180, %162 : tile<128x128xf32>
    %183 = mulf %182, %181 : tile<128x128xf32>
    %184 = ftof %183 : tile<128x128xf32> -> tile<128x128xbf16>
    %185 = constant <i64: 0> : tile<i64>
    %186 = constant <i64: 2147479552> : tile<i64>
    %187 = maxi %128, %185 signed : tile<i64>
    %188 = mini %187, %186 signed : tile<i64>
    %189 = assume bounded<0, 2147479552>, %188 : tile<i64>
    %190 = assume div_by<16>, %189 : tile<i64>
    %191 = make_tensor_view %98, shape = [%190, 192], strides = [192, 1] : tile<i64> -> tensor_view<?x192xbf16, strides=[192,1]>
    %192 = make_partition_view %191 : partition_view<tile=(128x128), tensor_view<?x192xbf16, strides=[192,1]>>
    %193 = store_view_tko weak %184, %192[%113, %126] token = %137 : tile<128x128xbf16>, partition_view<tile=(128x128), tensor_view<?x192xbf16, strides=[192,1]>>, tile<i64> -> token
    return
  }
}

