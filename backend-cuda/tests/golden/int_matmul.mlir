// kernel k0_matmul
cuda_tile.module @tir {
  entry @tir_matmul(%0: tile<ptr<i32>>, %1: tile<ptr<i32>>, %2: tile<ptr<i32>>, %3: tile<i64>, %4: tile<i64>) {
    %5, %6, %7 = get_tile_block_id : tile<i32>
    %8 = exti %5 unsigned : tile<i32> -> tile<i64>
    %9 = divi %8, %4 signed : tile<i64>
    %10 = remi %8, %4 signed : tile<i64>
    %11 = constant <i64: 5> : tile<i64>
    %12 = constant <i64: 3> : tile<i64>
    %13 = constant <i64: 7> : tile<i64>
    %14 = constant <i64: 8> : tile<i64>
    %15 = constant <i64: 14> : tile<i64>
    %16 = constant <i64: 1> : tile<i64>
    %17 = constant <i64: 0> : tile<i64>
    %18 = constant <i64: 1> : tile<i64>
    %19 = make_token : token
    %20 = constant <i64: 0> : tile<i64>
    %21 = reshape %20 : tile<i64> -> tile<1x1xi64>
    %22 = broadcast %21 : tile<1x1xi64> -> tile<8x4xi64>
    %102 = for %23 in (%17 to %16, step %18) : tile<i64> iter_values(%24 = %22) -> (tile<8x4xi64>) {
      %25 = constant <i64: 0> : tile<i64>
      %26 = make_tensor_view %0, shape = [5, 7], strides = [7, 1] : tensor_view<5x7xi32, strides=[7,1]>
      %27 = make_partition_view %26 : partition_view<tile=(8x8), padding_value = zero, tensor_view<5x7xi32, strides=[7,1]>>
      %28, %29 = load_view_tko weak %27[%9, %23] : partition_view<tile=(8x8), padding_value = zero, tensor_view<5x7xi32, strides=[7,1]>>, tile<i64> -> tile<8x8xi32>, token
      %30 = constant <i64: 0> : tile<i64>
      %31 = make_tensor_view %1, shape = [7, 3], strides = [3, 1] : tensor_view<7x3xi32, strides=[3,1]>
      %32 = make_partition_view %31 : partition_view<tile=(8x4), padding_value = zero, tensor_view<7x3xi32, strides=[3,1]>>
      %33, %34 = load_view_tko weak %32[%23, %10] : partition_view<tile=(8x4), padding_value = zero, tensor_view<7x3xi32, strides=[3,1]>>, tile<i64> -> tile<8x4xi32>, token
      %35 = reshape %17 : tile<i64> -> tile<1x1xi64>
      %36 = broadcast %35 : tile<1x1xi64> -> tile<8x8xi64>
      %37 = muli %23, %14 : tile<i64>
      %38 = reshape %37 : tile<i64> -> tile<1x1xi64>
      %39 = broadcast %38 : tile<1x1xi64> -> tile<8x8xi64>
      %40 = iota : tile<8xi64>
      %41 = reshape %40 : tile<8xi64> -> tile<1x8xi64>
      %42 = broadcast %41 : tile<1x8xi64> -> tile<8x8xi64>
      %43 = addi %39, %42 : tile<8x8xi64>
      %44 = reshape %18 : tile<i64> -> tile<1x1xi64>
      %45 = broadcast %44 : tile<1x1xi64> -> tile<8x8xi64>
      %46 = muli %43, %45 : tile<8x8xi64>
      %47 = addi %36, %46 : tile<8x8xi64>
      %48 = reshape %17 : tile<i64> -> tile<1x1xi64>
      %49 = broadcast %48 : tile<1x1xi64> -> tile<8x8xi64>
      %50 = reshape %13 : tile<i64> -> tile<1x1xi64>
      %51 = broadcast %50 : tile<1x1xi64> -> tile<8x8xi64>
      %52 = cmpi greater_than_or_equal %47, %49, signed : tile<8x8xi64> -> tile<8x8xi1>
      %53 = cmpi less_than %47, %51, signed : tile<8x8xi64> -> tile<8x8xi1>
      %54 = andi %52, %53 : tile<8x8xi1>
      %55 = constant <i32: 0> : tile<i32>
      %56 = reshape %55 : tile<i32> -> tile<1x1xi32>
      %57 = broadcast %56 : tile<1x1xi32> -> tile<8x8xi32>
      %58 = select %54, %28, %57 : tile<8x8xi1>, tile<8x8xi32>
      %59 = reshape %17 : tile<i64> -> tile<1x1xi64>
      %60 = broadcast %59 : tile<1x1xi64> -> tile<8x4xi64>
      %61 = muli %23, %14 : tile<i64>
      %62 = reshape %61 : tile<i64> -> tile<1x1xi64>
      %63 = broadcast %62 : tile<1x1xi64> -> tile<8x4xi64>
      %64 = iota : tile<8xi64>
      %65 = reshape %64 : tile<8xi64> -> tile<8x1xi64>
      %66 = broadcast %65 : tile<8x1xi64> -> tile<8x4xi64>
      %67 = addi %63, %66 : tile<8x4xi64>
      %68 = reshape %18 : tile<i64> -> tile<1x1xi64>
      %69 = broadcast %68 : tile<1x1xi64> -> tile<8x4xi64>
      %70 = muli %67, %69 : tile<8x4xi64>
      %71 = addi %60, %70 : tile<8x4xi64>
      %72 = reshape %17 : tile<i64> -> tile<1x1xi64>
      %73 = broadcast %72 : tile<1x1xi64> -> tile<8x4xi64>
      %74 = reshape %13 : tile<i64> -> tile<1x1xi64>
      %75 = broadcast %74 : tile<1x1xi64> -> tile<8x4xi64>
      %76 = cmpi greater_than_or_equal %71, %73, signed : tile<8x4xi64> -> tile<8x4xi1>
      %77 = cmpi less_than %71, %75, signed : tile<8x4xi64> -> tile<8x4xi1>
      %78 = andi %76, %77 : tile<8x4xi1>
      %79 = constant <i32: 0> : tile<i32>
      %80 = reshape %79 : tile<i32> -> tile<1x1xi32>
      %81 = broadcast %80 : tile<1x1xi32> -> tile<8x4xi32>
      %82 = select %78, %33, %81 : tile<8x4xi1>, tile<8x4xi32>
      %83 = exti %58 signed : tile<8x8xi32> -> tile<8x8xi64>
      %84 = exti %82 signed : tile<8x4xi32> -> tile<8x4xi64>
      %85 = reshape %83 : tile<8x8xi64> -> tile<1x8x8xi64>
      %86 = reshape %84 : tile<8x4xi64> -> tile<1x8x4xi64>
      %87 = reshape %24 : tile<8x4xi64> -> tile<1x8x4xi64>
      %88 = constant <i32: 0> : tile<i32>
      %89 = constant <i32: 8> : tile<i32>
      %90 = constant <i32: 1> : tile<i32>
      %100 = for %91 in (%88 to %89, step %90) : tile<i32> iter_values(%92 = %87) -> (tile<1x8x4xi64>) {
        %93 = constant <i32: 0> : tile<i32>
        %94 = extract %85[%93, %93, %91] : tile<1x8x8xi64> -> tile<1x8x1xi64>
        %95 = extract %86[%93, %91, %93] : tile<1x8x4xi64> -> tile<1x1x4xi64>
        %96 = broadcast %94 : tile<1x8x1xi64> -> tile<1x8x4xi64>
        %97 = broadcast %95 : tile<1x1x4xi64> -> tile<1x8x4xi64>
        %98 = muli %96, %97 : tile<1x8x4xi64>
        %99 = addi %92, %98 : tile<1x8x4xi64>
        continue %99 : tile<1x8x4xi64>
      }
      %101 = reshape %100 : tile<1x8x4xi64> -> tile<8x4xi64>
      continue %101 : tile<8x4xi64>
    }
    %103 = trunci %102 : tile<8x4xi64> -> tile<8x4xi32>
    %104 = make_tensor_view %2, shape = [5, 3], strides = [3, 1] : tensor_view<5x3xi32, strides=[3,1]>
    %105 = make_partition_view %104 : partition_view<tile=(8x4), tensor_view<5x3xi32, strides=[3,1]>>
    %106 = store_view_tko weak %103, %105[%9, %10] token = %19 : tile<8x4xi32>, partition_view<tile=(8x4), tensor_view<5x3xi32, strides=[3,1]>>, tile<i64> -> token
    return
  }
}

