// kernel k0_matmul
cuda_tile.module @tir {
  entry @tir_matmul(%0: tile<ptr<i32>>, %1: tile<ptr<i32>>, %2: tile<ptr<i32>>, %3: tile<i64>, %4: tile<i64>) optimization_hints = #cuda_tile.optimization_hints<default = {occupancy = 2}> {
    %5 = assume div_by<16>, %0 : tile<ptr<i32>>
    %6 = assume div_by<16>, %1 : tile<ptr<i32>>
    %7 = assume div_by<16>, %2 : tile<ptr<i32>>
    %8, %9, %10 = get_tile_block_id : tile<i32>
    %11 = exti %8 unsigned : tile<i32> -> tile<i64>
    %12 = muli %3, %4 : tile<i64>
    %13 = remi %11, %12 signed : tile<i64>
    %14 = constant <i64: 8> : tile<i64>
    %15 = muli %14, %4 : tile<i64>
    %16 = divi %13, %15 signed : tile<i64>
    %17 = muli %16, %14 : tile<i64>
    %18 = subi %3, %17 : tile<i64>
    %19 = mini %18, %14 signed : tile<i64>
    %20 = remi %13, %15 signed : tile<i64>
    %21 = remi %20, %19 signed : tile<i64>
    %22 = addi %17, %21 : tile<i64>
    %23 = divi %20, %19 signed : tile<i64>
    %24 = muli %3, %4 : tile<i64>
    %25 = remi %11, %24 signed : tile<i64>
    %26 = constant <i64: 8> : tile<i64>
    %27 = muli %26, %4 : tile<i64>
    %28 = divi %25, %27 signed : tile<i64>
    %29 = muli %28, %26 : tile<i64>
    %30 = subi %3, %29 : tile<i64>
    %31 = mini %30, %26 signed : tile<i64>
    %32 = remi %25, %27 signed : tile<i64>
    %33 = remi %32, %31 signed : tile<i64>
    %34 = addi %29, %33 : tile<i64>
    %35 = divi %32, %31 signed : tile<i64>
    %36 = constant <i64: 5> : tile<i64>
    %37 = constant <i64: 3> : tile<i64>
    %38 = constant <i64: 0> : tile<i64>
    %39 = constant <i64: 7> : tile<i64>
    %40 = constant <i64: 8> : tile<i64>
    %41 = constant <i64: 14> : tile<i64>
    %42 = constant <i64: 1> : tile<i64>
    %43 = constant <i64: 1> : tile<i64>
    %44 = make_token : token
    %45 = constant <i64: 0> : tile<i64>
    %46 = reshape %45 : tile<i64> -> tile<1x1xi64>
    %47 = broadcast %46 : tile<1x1xi64> -> tile<8x4xi64>
    %127 = for %48 in (%38 to %42, step %43) : tile<i64> iter_values(%49 = %47) -> (tile<8x4xi64>) {
      %50 = constant <i64: 0> : tile<i64>
      %51 = make_tensor_view %5, shape = [5, 7], strides = [7, 1] : tensor_view<5x7xi32, strides=[7,1]>
      %52 = make_partition_view %51 : partition_view<tile=(8x8), padding_value = zero, tensor_view<5x7xi32, strides=[7,1]>>
      %53, %54 = load_view_tko weak %52[%22, %48] optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : partition_view<tile=(8x8), padding_value = zero, tensor_view<5x7xi32, strides=[7,1]>>, tile<i64> -> tile<8x8xi32>, token
      %55 = constant <i64: 0> : tile<i64>
      %56 = make_tensor_view %6, shape = [7, 3], strides = [3, 1] : tensor_view<7x3xi32, strides=[3,1]>
      %57 = make_partition_view %56 : partition_view<tile=(8x4), padding_value = zero, tensor_view<7x3xi32, strides=[3,1]>>
      %58, %59 = load_view_tko weak %57[%48, %35] optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : partition_view<tile=(8x4), padding_value = zero, tensor_view<7x3xi32, strides=[3,1]>>, tile<i64> -> tile<8x4xi32>, token
      %60 = reshape %38 : tile<i64> -> tile<1x1xi64>
      %61 = broadcast %60 : tile<1x1xi64> -> tile<8x8xi64>
      %62 = muli %48, %40 : tile<i64>
      %63 = reshape %62 : tile<i64> -> tile<1x1xi64>
      %64 = broadcast %63 : tile<1x1xi64> -> tile<8x8xi64>
      %65 = iota : tile<8xi64>
      %66 = reshape %65 : tile<8xi64> -> tile<1x8xi64>
      %67 = broadcast %66 : tile<1x8xi64> -> tile<8x8xi64>
      %68 = addi %64, %67 : tile<8x8xi64>
      %69 = reshape %43 : tile<i64> -> tile<1x1xi64>
      %70 = broadcast %69 : tile<1x1xi64> -> tile<8x8xi64>
      %71 = muli %68, %70 : tile<8x8xi64>
      %72 = addi %61, %71 : tile<8x8xi64>
      %73 = reshape %38 : tile<i64> -> tile<1x1xi64>
      %74 = broadcast %73 : tile<1x1xi64> -> tile<8x8xi64>
      %75 = reshape %39 : tile<i64> -> tile<1x1xi64>
      %76 = broadcast %75 : tile<1x1xi64> -> tile<8x8xi64>
      %77 = cmpi greater_than_or_equal %72, %74, signed : tile<8x8xi64> -> tile<8x8xi1>
      %78 = cmpi less_than %72, %76, signed : tile<8x8xi64> -> tile<8x8xi1>
      %79 = andi %77, %78 : tile<8x8xi1>
      %80 = constant <i32: 0> : tile<i32>
      %81 = reshape %80 : tile<i32> -> tile<1x1xi32>
      %82 = broadcast %81 : tile<1x1xi32> -> tile<8x8xi32>
      %83 = select %79, %53, %82 : tile<8x8xi1>, tile<8x8xi32>
      %84 = reshape %38 : tile<i64> -> tile<1x1xi64>
      %85 = broadcast %84 : tile<1x1xi64> -> tile<8x4xi64>
      %86 = muli %48, %40 : tile<i64>
      %87 = reshape %86 : tile<i64> -> tile<1x1xi64>
      %88 = broadcast %87 : tile<1x1xi64> -> tile<8x4xi64>
      %89 = iota : tile<8xi64>
      %90 = reshape %89 : tile<8xi64> -> tile<8x1xi64>
      %91 = broadcast %90 : tile<8x1xi64> -> tile<8x4xi64>
      %92 = addi %88, %91 : tile<8x4xi64>
      %93 = reshape %43 : tile<i64> -> tile<1x1xi64>
      %94 = broadcast %93 : tile<1x1xi64> -> tile<8x4xi64>
      %95 = muli %92, %94 : tile<8x4xi64>
      %96 = addi %85, %95 : tile<8x4xi64>
      %97 = reshape %38 : tile<i64> -> tile<1x1xi64>
      %98 = broadcast %97 : tile<1x1xi64> -> tile<8x4xi64>
      %99 = reshape %39 : tile<i64> -> tile<1x1xi64>
      %100 = broadcast %99 : tile<1x1xi64> -> tile<8x4xi64>
      %101 = cmpi greater_than_or_equal %96, %98, signed : tile<8x4xi64> -> tile<8x4xi1>
      %102 = cmpi less_than %96, %100, signed : tile<8x4xi64> -> tile<8x4xi1>
      %103 = andi %101, %102 : tile<8x4xi1>
      %104 = constant <i32: 0> : tile<i32>
      %105 = reshape %104 : tile<i32> -> tile<1x1xi32>
      %106 = broadcast %105 : tile<1x1xi32> -> tile<8x4xi32>
      %107 = select %103, %58, %106 : tile<8x4xi1>, tile<8x4xi32>
      %108 = exti %83 signed : tile<8x8xi32> -> tile<8x8xi64>
      %109 = exti %107 signed : tile<8x4xi32> -> tile<8x4xi64>
      %110 = reshape %108 : tile<8x8xi64> -> tile<1x8x8xi64>
      %111 = reshape %109 : tile<8x4xi64> -> tile<1x8x4xi64>
      %112 = reshape %49 : tile<8x4xi64> -> tile<1x8x4xi64>
      %113 = constant <i32: 0> : tile<i32>
      %114 = constant <i32: 8> : tile<i32>
      %115 = constant <i32: 1> : tile<i32>
      %125 = for %116 in (%113 to %114, step %115) : tile<i32> iter_values(%117 = %112) -> (tile<1x8x4xi64>) {
        %118 = constant <i32: 0> : tile<i32>
        %119 = extract %110[%118, %118, %116] : tile<1x8x8xi64> -> tile<1x8x1xi64>
        %120 = extract %111[%118, %116, %118] : tile<1x8x4xi64> -> tile<1x1x4xi64>
        %121 = broadcast %119 : tile<1x8x1xi64> -> tile<1x8x4xi64>
        %122 = broadcast %120 : tile<1x1x4xi64> -> tile<1x8x4xi64>
        %123 = muli %121, %122 : tile<1x8x4xi64>
        %124 = addi %117, %123 : tile<1x8x4xi64>
        continue %124 : tile<1x8x4xi64>
      }
      %126 = reshape %125 : tile<1x8x4xi64> -> tile<8x4xi64>
      continue %126 : tile<8x4xi64>
    }
    %128 = trunci %127 : tile<8x4xi64> -> tile<8x4xi32>
    %129 = make_tensor_view %7, shape = [5, 3], strides = [3, 1] : tensor_view<5x3xi32, strides=[3,1]>
    %130 = make_partition_view %129 : partition_view<tile=(8x4), tensor_view<5x3xi32, strides=[3,1]>>
    %131 = store_view_tko weak %128, %130[%22, %35] token = %44 optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : tile<8x4xi32>, partition_view<tile=(8x4), tensor_view<5x3xi32, strides=[3,1]>>, tile<i64> -> token
    return
  }
}

