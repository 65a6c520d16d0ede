// kernel k0_matmul
cuda_tile.module @tir {
  entry @tir_matmul(%0: tile<ptr<i32>>, %1: tile<ptr<i32>>, %2: tile<ptr<i32>>, %3: tile<i64>, %4: tile<i64>) {
    %5 = assume div_by<16>, %0 : tile<ptr<i32>>
    %6 = assume div_by<16>, %1 : tile<ptr<i32>>
    %7 = assume div_by<16>, %2 : tile<ptr<i32>>
    %8, %9, %10 = get_tile_block_id : tile<i32>
    %11 = exti %8 unsigned : tile<i32> -> tile<i64>
    %12 = muli %3, %4 : tile<i64>
    %13, %14, %15 = get_num_tile_blocks : tile<i32>
    %16 = exti %13 unsigned : tile<i32> -> tile<i64>
    for %17 in (%11 to %12, step %16) : tile<i64> {
      %18 = muli %3, %4 : tile<i64>
      %19 = remi %17, %18 signed : tile<i64>
      %20 = constant <i64: 8> : tile<i64>
      %21 = muli %20, %4 : tile<i64>
      %22 = divi %19, %21 signed : tile<i64>
      %23 = muli %22, %20 : tile<i64>
      %24 = subi %3, %23 : tile<i64>
      %25 = mini %24, %20 signed : tile<i64>
      %26 = remi %19, %21 signed : tile<i64>
      %27 = remi %26, %25 signed : tile<i64>
      %28 = addi %23, %27 : tile<i64>
      %29 = divi %26, %25 signed : tile<i64>
      %30 = muli %3, %4 : tile<i64>
      %31 = remi %17, %30 signed : tile<i64>
      %32 = constant <i64: 8> : tile<i64>
      %33 = muli %32, %4 : tile<i64>
      %34 = divi %31, %33 signed : tile<i64>
      %35 = muli %34, %32 : tile<i64>
      %36 = subi %3, %35 : tile<i64>
      %37 = mini %36, %32 signed : tile<i64>
      %38 = remi %31, %33 signed : tile<i64>
      %39 = remi %38, %37 signed : tile<i64>
      %40 = addi %35, %39 : tile<i64>
      %41 = divi %38, %37 signed : tile<i64>
      %42 = constant <i64: 5> : tile<i64>
      %43 = constant <i64: 3> : tile<i64>
      %44 = constant <i64: 7> : tile<i64>
      %45 = constant <i64: 8> : tile<i64>
      %46 = constant <i64: 14> : tile<i64>
      %47 = constant <i64: 1> : tile<i64>
      %48 = constant <i64: 0> : tile<i64>
      %49 = constant <i64: 1> : tile<i64>
      %50 = make_token : token
      %51 = constant <i64: 0> : tile<i64>
      %52 = reshape %51 : tile<i64> -> tile<1x1xi64>
      %53 = broadcast %52 : tile<1x1xi64> -> tile<8x4xi64>
      %133 = for %54 in (%48 to %47, step %49) : tile<i64> iter_values(%55 = %53) -> (tile<8x4xi64>) {
        %56 = constant <i64: 0> : tile<i64>
        %57 = make_tensor_view %5, shape = [5, 7], strides = [7, 1] : tensor_view<5x7xi32, strides=[7,1]>
        %58 = make_partition_view %57 : partition_view<tile=(8x8), padding_value = zero, tensor_view<5x7xi32, strides=[7,1]>>
        %59, %60 = load_view_tko weak %58[%28, %54] optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : partition_view<tile=(8x8), padding_value = zero, tensor_view<5x7xi32, strides=[7,1]>>, tile<i64> -> tile<8x8xi32>, token
        %61 = constant <i64: 0> : tile<i64>
        %62 = make_tensor_view %6, shape = [7, 3], strides = [3, 1] : tensor_view<7x3xi32, strides=[3,1]>
        %63 = make_partition_view %62 : partition_view<tile=(8x4), padding_value = zero, tensor_view<7x3xi32, strides=[3,1]>>
        %64, %65 = load_view_tko weak %63[%54, %41] optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : partition_view<tile=(8x4), padding_value = zero, tensor_view<7x3xi32, strides=[3,1]>>, tile<i64> -> tile<8x4xi32>, token
        %66 = reshape %48 : tile<i64> -> tile<1x1xi64>
        %67 = broadcast %66 : tile<1x1xi64> -> tile<8x8xi64>
        %68 = muli %54, %45 : tile<i64>
        %69 = reshape %68 : tile<i64> -> tile<1x1xi64>
        %70 = broadcast %69 : tile<1x1xi64> -> tile<8x8xi64>
        %71 = iota : tile<8xi64>
        %72 = reshape %71 : tile<8xi64> -> tile<1x8xi64>
        %73 = broadcast %72 : tile<1x8xi64> -> tile<8x8xi64>
        %74 = addi %70, %73 : tile<8x8xi64>
        %75 = reshape %49 : tile<i64> -> tile<1x1xi64>
        %76 = broadcast %75 : tile<1x1xi64> -> tile<8x8xi64>
        %77 = muli %74, %76 : tile<8x8xi64>
        %78 = addi %67, %77 : tile<8x8xi64>
        %79 = reshape %48 : tile<i64> -> tile<1x1xi64>
        %80 = broadcast %79 : tile<1x1xi64> -> tile<8x8xi64>
        %81 = reshape %44 : tile<i64> -> tile<1x1xi64>
        %82 = broadcast %81 : tile<1x1xi64> -> tile<8x8xi64>
        %83 = cmpi greater_than_or_equal %78, %80, signed : tile<8x8xi64> -> tile<8x8xi1>
        %84 = cmpi less_than %78, %82, signed : tile<8x8xi64> -> tile<8x8xi1>
        %85 = andi %83, %84 : tile<8x8xi1>
        %86 = constant <i32: 0> : tile<i32>
        %87 = reshape %86 : tile<i32> -> tile<1x1xi32>
        %88 = broadcast %87 : tile<1x1xi32> -> tile<8x8xi32>
        %89 = select %85, %59, %88 : tile<8x8xi1>, tile<8x8xi32>
        %90 = reshape %48 : tile<i64> -> tile<1x1xi64>
        %91 = broadcast %90 : tile<1x1xi64> -> tile<8x4xi64>
        %92 = muli %54, %45 : tile<i64>
        %93 = reshape %92 : tile<i64> -> tile<1x1xi64>
        %94 = broadcast %93 : tile<1x1xi64> -> tile<8x4xi64>
        %95 = iota : tile<8xi64>
        %96 = reshape %95 : tile<8xi64> -> tile<8x1xi64>
        %97 = broadcast %96 : tile<8x1xi64> -> tile<8x4xi64>
        %98 = addi %94, %97 : tile<8x4xi64>
        %99 = reshape %49 : tile<i64> -> tile<1x1xi64>
        %100 = broadcast %99 : tile<1x1xi64> -> tile<8x4xi64>
        %101 = muli %98, %100 : tile<8x4xi64>
        %102 = addi %91, %101 : tile<8x4xi64>
        %103 = reshape %48 : tile<i64> -> tile<1x1xi64>
        %104 = broadcast %103 : tile<1x1xi64> -> tile<8x4xi64>
        %105 = reshape %44 : tile<i64> -> tile<1x1xi64>
        %106 = broadcast %105 : tile<1x1xi64> -> tile<8x4xi64>
        %107 = cmpi greater_than_or_equal %102, %104, signed : tile<8x4xi64> -> tile<8x4xi1>
        %108 = cmpi less_than %102, %106, signed : tile<8x4xi64> -> tile<8x4xi1>
        %109 = andi %107, %108 : tile<8x4xi1>
        %110 = constant <i32: 0> : tile<i32>
        %111 = reshape %110 : tile<i32> -> tile<1x1xi32>
        %112 = broadcast %111 : tile<1x1xi32> -> tile<8x4xi32>
        %113 = select %109, %64, %112 : tile<8x4xi1>, tile<8x4xi32>
        %114 = exti %89 signed : tile<8x8xi32> -> tile<8x8xi64>
        %115 = exti %113 signed : tile<8x4xi32> -> tile<8x4xi64>
        %116 = reshape %114 : tile<8x8xi64> -> tile<1x8x8xi64>
        %117 = reshape %115 : tile<8x4xi64> -> tile<1x8x4xi64>
        %118 = reshape %55 : tile<8x4xi64> -> tile<1x8x4xi64>
        %119 = constant <i32: 0> : tile<i32>
        %120 = constant <i32: 8> : tile<i32>
        %121 = constant <i32: 1> : tile<i32>
        %131 = for %122 in (%119 to %120, step %121) : tile<i32> iter_values(%123 = %118) -> (tile<1x8x4xi64>) {
          %124 = constant <i32: 0> : tile<i32>
          %125 = extract %116[%124, %124, %122] : tile<1x8x8xi64> -> tile<1x8x1xi64>
          %126 = extract %117[%124, %122, %124] : tile<1x8x4xi64> -> tile<1x1x4xi64>
          %127 = broadcast %125 : tile<1x8x1xi64> -> tile<1x8x4xi64>
          %128 = broadcast %126 : tile<1x1x4xi64> -> tile<1x8x4xi64>
          %129 = muli %127, %128 : tile<1x8x4xi64>
          %130 = addi %123, %129 : tile<1x8x4xi64>
          continue %130 : tile<1x8x4xi64>
        }
        %132 = reshape %131 : tile<1x8x4xi64> -> tile<8x4xi64>
        continue %132 : tile<8x4xi64>
      }
      %134 = trunci %133 : tile<8x4xi64> -> tile<8x4xi32>
      %135 = make_tensor_view %7, shape = [5, 3], strides = [3, 1] : tensor_view<5x3xi32, strides=[3,1]>
      %136 = make_partition_view %135 : partition_view<tile=(8x4), tensor_view<5x3xi32, strides=[3,1]>>
      %137 = store_view_tko weak %134, %136[%28, %41] token = %50 optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : tile<8x4xi32>, partition_view<tile=(8x4), tensor_view<5x3xi32, strides=[3,1]>>, tile<i64> -> token
      continue
    }
    return
  }
}

