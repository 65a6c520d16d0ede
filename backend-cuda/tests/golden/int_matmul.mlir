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
    %115 = for %48 in (%38 to %42, step %43) : tile<i64> iter_values(%49 = %47) -> (tile<8x4xi64>) {
      %50 = constant <i64: 0> : tile<i64>
      %51 = make_tensor_view %5, shape = [5, 7], strides = [7, 1] : tensor_view<5x7xi32, strides=[7,1]>
      %52 = make_partition_view %51 : partition_view<tile=(8x8), padding_value = zero, tensor_view<5x7xi32, strides=[7,1]>>
      %53, %54 = load_view_tko weak %52[%22, %48] optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : partition_view<tile=(8x8), padding_value = zero, tensor_view<5x7xi32, strides=[7,1]>>, tile<i64> -> tile<8x8xi32>, token
      %55 = constant <i64: 0> : tile<i64>
      %56 = make_tensor_view %6, shape = [7, 3], strides = [3, 1] : tensor_view<7x3xi32, strides=[3,1]>
      %57 = make_partition_view %56 : partition_view<tile=(8x4), padding_value = zero, tensor_view<7x3xi32, strides=[3,1]>>
      %58, %59 = load_view_tko weak %57[%48, %35] optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : partition_view<tile=(8x4), padding_value = zero, tensor_view<7x3xi32, strides=[3,1]>>, tile<i64> -> tile<8x4xi32>, token
      %60 = muli %48, %40 : tile<i64>
      %61 = reshape %60 : tile<i64> -> tile<1x1xi64>
      %62 = broadcast %61 : tile<1x1xi64> -> tile<1x8xi64>
      %63 = iota : tile<8xi64>
      %64 = reshape %63 : tile<8xi64> -> tile<1x8xi64>
      %65 = addi %62, %64 : tile<1x8xi64>
      %66 = reshape %38 : tile<i64> -> tile<1x1xi64>
      %67 = broadcast %66 : tile<1x1xi64> -> tile<1x8xi64>
      %68 = reshape %39 : tile<i64> -> tile<1x1xi64>
      %69 = broadcast %68 : tile<1x1xi64> -> tile<1x8xi64>
      %70 = cmpi greater_than_or_equal %65, %67, signed : tile<1x8xi64> -> tile<1x8xi1>
      %71 = cmpi less_than %65, %69, signed : tile<1x8xi64> -> tile<1x8xi1>
      %72 = andi %70, %71 : tile<1x8xi1>
      %73 = broadcast %72 : tile<1x8xi1> -> tile<8x8xi1>
      %74 = constant <i32: 0> : tile<i32>
      %75 = reshape %74 : tile<i32> -> tile<1x1xi32>
      %76 = broadcast %75 : tile<1x1xi32> -> tile<8x8xi32>
      %77 = select %73, %53, %76 : tile<8x8xi1>, tile<8x8xi32>
      %78 = muli %48, %40 : tile<i64>
      %79 = reshape %78 : tile<i64> -> tile<1x1xi64>
      %80 = broadcast %79 : tile<1x1xi64> -> tile<8x1xi64>
      %81 = iota : tile<8xi64>
      %82 = reshape %81 : tile<8xi64> -> tile<8x1xi64>
      %83 = addi %80, %82 : tile<8x1xi64>
      %84 = reshape %38 : tile<i64> -> tile<1x1xi64>
      %85 = broadcast %84 : tile<1x1xi64> -> tile<8x1xi64>
      %86 = reshape %39 : tile<i64> -> tile<1x1xi64>
      %87 = broadcast %86 : tile<1x1xi64> -> tile<8x1xi64>
      %88 = cmpi greater_than_or_equal %83, %85, signed : tile<8x1xi64> -> tile<8x1xi1>
      %89 = cmpi less_than %83, %87, signed : tile<8x1xi64> -> tile<8x1xi1>
      %90 = andi %88, %89 : tile<8x1xi1>
      %91 = broadcast %90 : tile<8x1xi1> -> tile<8x4xi1>
      %92 = constant <i32: 0> : tile<i32>
      %93 = reshape %92 : tile<i32> -> tile<1x1xi32>
      %94 = broadcast %93 : tile<1x1xi32> -> tile<8x4xi32>
      %95 = select %91, %58, %94 : tile<8x4xi1>, tile<8x4xi32>
      %96 = exti %77 signed : tile<8x8xi32> -> tile<8x8xi64>
      %97 = exti %95 signed : tile<8x4xi32> -> tile<8x4xi64>
      %98 = reshape %96 : tile<8x8xi64> -> tile<1x8x8xi64>
      %99 = reshape %97 : tile<8x4xi64> -> tile<1x8x4xi64>
      %100 = reshape %49 : tile<8x4xi64> -> tile<1x8x4xi64>
      %101 = constant <i32: 0> : tile<i32>
      %102 = constant <i32: 8> : tile<i32>
      %103 = constant <i32: 1> : tile<i32>
      %113 = for %104 in (%101 to %102, step %103) : tile<i32> iter_values(%105 = %100) -> (tile<1x8x4xi64>) {
        %106 = constant <i32: 0> : tile<i32>
        %107 = extract %98[%106, %106, %104] : tile<1x8x8xi64> -> tile<1x8x1xi64>
        %108 = extract %99[%106, %104, %106] : tile<1x8x4xi64> -> tile<1x1x4xi64>
        %109 = broadcast %107 : tile<1x8x1xi64> -> tile<1x8x4xi64>
        %110 = broadcast %108 : tile<1x1x4xi64> -> tile<1x8x4xi64>
        %111 = muli %109, %110 : tile<1x8x4xi64>
        %112 = addi %105, %111 : tile<1x8x4xi64>
        continue %112 : tile<1x8x4xi64>
      }
      %114 = reshape %113 : tile<1x8x4xi64> -> tile<8x4xi64>
      continue %114 : tile<8x4xi64>
    }
    %116 = trunci %115 : tile<8x4xi64> -> tile<8x4xi32>
    %117 = make_tensor_view %7, shape = [5, 3], strides = [3, 1] : tensor_view<5x3xi32, strides=[3,1]>
    %118 = make_partition_view %117 : partition_view<tile=(8x4), tensor_view<5x3xi32, strides=[3,1]>>
    %119 = store_view_tko weak %116, %118[%22, %35] token = %44 optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : tile<8x4xi32>, partition_view<tile=(8x4), tensor_view<5x3xi32, strides=[3,1]>>, tile<i64> -> token
    return
  }
}

