// kernel k0_gather
cuda_tile.module @tir {
  entry @tir_gather(%0: tile<ptr<i64>>, %1: tile<ptr<f32>>, %2: tile<ptr<f32>>, %3: tile<i64>, %4: tile<i64>) {
    %5, %6, %7 = get_tile_block_id : tile<i32>
    %8 = exti %5 unsigned : tile<i32> -> tile<i64>
    %9 = divi %8, %4 signed : tile<i64>
    %10 = remi %8, %4 signed : tile<i64>
    %11 = constant <i64: 7> : tile<i64>
    %12 = constant <i64: 32> : tile<i64>
    %13 = constant <i64: 0> : tile<i64>
    %14 = constant <i64: 1> : tile<i64>
    %15 = constant <i64: 100> : tile<i64>
    %16 = constant <i64: 32> : tile<i64>
    %17 = muli %10, %12 : tile<i64>
    %18 = make_token : token
    %19 = constant <i64: 0> : tile<i64>
    %20 = make_tensor_view %0, shape = [7, 1], strides = [1, 1] : tensor_view<7x1xi64, strides=[1,1]>
    %21 = make_partition_view %20 : partition_view<tile=(8x1), padding_value = zero, tensor_view<7x1xi64, strides=[1,1]>>
    %22, %23 = load_view_tko weak %21[%9, %19] : partition_view<tile=(8x1), padding_value = zero, tensor_view<7x1xi64, strides=[1,1]>>, tile<i64> -> tile<8x1xi64>, token
    %24 = broadcast %22 : tile<8x1xi64> -> tile<8x32xi64>
    %25 = constant <i64: 32> : tile<i64>
    %26 = muli %10, %25 : tile<i64>
    %27 = reshape %26 : tile<i64> -> tile<1x1xi64>
    %28 = broadcast %27 : tile<1x1xi64> -> tile<8x32xi64>
    %29 = iota : tile<32xi64>
    %30 = reshape %29 : tile<32xi64> -> tile<1x32xi64>
    %31 = broadcast %30 : tile<1x32xi64> -> tile<8x32xi64>
    %32 = addi %28, %31 : tile<8x32xi64>
    %33 = reshape %12 : tile<i64> -> tile<1x1xi64>
    %34 = broadcast %33 : tile<1x1xi64> -> tile<8x32xi64>
    %35 = cmpi less_than %32, %34, signed : tile<8x32xi64> -> tile<8x32xi1>
    %36 = constant <i64: 0> : tile<i64>
    %37 = reshape %36 : tile<i64> -> tile<1x1xi64>
    %38 = broadcast %37 : tile<1x1xi64> -> tile<8x32xi64>
    %39 = select %35, %24, %38 : tile<8x32xi1>, tile<8x32xi64>
    %40 = reshape %13 : tile<i64> -> tile<1x1xi64>
    %41 = broadcast %40 : tile<1x1xi64> -> tile<8x32xi64>
    %42 = reshape %17 : tile<i64> -> tile<1x1xi64>
    %43 = broadcast %42 : tile<1x1xi64> -> tile<8x32xi64>
    %44 = iota : tile<32xi64>
    %45 = reshape %44 : tile<32xi64> -> tile<1x32xi64>
    %46 = broadcast %45 : tile<1x32xi64> -> tile<8x32xi64>
    %47 = addi %43, %46 : tile<8x32xi64>
    %48 = reshape %14 : tile<i64> -> tile<1x1xi64>
    %49 = broadcast %48 : tile<1x1xi64> -> tile<8x32xi64>
    %50 = muli %47, %49 : tile<8x32xi64>
    %51 = addi %41, %50 : tile<8x32xi64>
    %52 = constant <i1: 1> : tile<i1>
    %53 = reshape %52 : tile<i1> -> tile<1x1xi1>
    %54 = broadcast %53 : tile<1x1xi1> -> tile<8x32xi1>
    %55 = constant <i64: 0> : tile<i64>
    %56 = reshape %55 : tile<i64> -> tile<1x1xi64>
    %57 = broadcast %56 : tile<1x1xi64> -> tile<8x32xi64>
    %58 = reshape %15 : tile<i64> -> tile<1x1xi64>
    %59 = broadcast %58 : tile<1x1xi64> -> tile<8x32xi64>
    %60 = cmpi greater_than_or_equal %39, %57, signed : tile<8x32xi64> -> tile<8x32xi1>
    %61 = cmpi less_than %39, %59, signed : tile<8x32xi64> -> tile<8x32xi1>
    %62 = andi %60, %61 : tile<8x32xi1>
    %63 = andi %54, %62 : tile<8x32xi1>
    %64 = reshape %16 : tile<i64> -> tile<1x1xi64>
    %65 = broadcast %64 : tile<1x1xi64> -> tile<8x32xi64>
    %66 = muli %39, %65 : tile<8x32xi64>
    %67 = constant <i64: 0> : tile<i64>
    %68 = reshape %67 : tile<i64> -> tile<1x1xi64>
    %69 = broadcast %68 : tile<1x1xi64> -> tile<8x32xi64>
    %70 = reshape %12 : tile<i64> -> tile<1x1xi64>
    %71 = broadcast %70 : tile<1x1xi64> -> tile<8x32xi64>
    %72 = cmpi greater_than_or_equal %51, %69, signed : tile<8x32xi64> -> tile<8x32xi1>
    %73 = cmpi less_than %51, %71, signed : tile<8x32xi64> -> tile<8x32xi1>
    %74 = andi %72, %73 : tile<8x32xi1>
    %75 = andi %63, %74 : tile<8x32xi1>
    %76 = reshape %14 : tile<i64> -> tile<1x1xi64>
    %77 = broadcast %76 : tile<1x1xi64> -> tile<8x32xi64>
    %78 = muli %51, %77 : tile<8x32xi64>
    %79 = addi %66, %78 : tile<8x32xi64>
    %80 = constant <i64: 0> : tile<i64>
    %81 = reshape %80 : tile<i64> -> tile<1x1xi64>
    %82 = broadcast %81 : tile<1x1xi64> -> tile<8x32xi64>
    %83 = select %75, %79, %82 : tile<8x32xi1>, tile<8x32xi64>
    %84 = reshape %1 : tile<ptr<f32>> -> tile<1x1xptr<f32>>
    %85 = broadcast %84 : tile<1x1xptr<f32>> -> tile<8x32xptr<f32>>
    %86 = offset %85, %83 : tile<8x32xptr<f32>>, tile<8x32xi64> -> tile<8x32xptr<f32>>
    %87 = constant <f32: 0.0> : tile<f32>
    %88 = reshape %87 : tile<f32> -> tile<1x1xf32>
    %89 = broadcast %88 : tile<1x1xf32> -> tile<8x32xf32>
    %90, %91 = load_ptr_tko weak %86, %75, %89 : tile<8x32xptr<f32>>, tile<8x32xi1>, tile<8x32xf32> -> tile<8x32xf32>, token
    %92 = make_tensor_view %2, shape = [7, 32], strides = [32, 1] : tensor_view<7x32xf32, strides=[32,1]>
    %93 = make_partition_view %92 : partition_view<tile=(8x32), tensor_view<7x32xf32, strides=[32,1]>>
    %94 = store_view_tko weak %90, %93[%9, %10] token = %18 : tile<8x32xf32>, partition_view<tile=(8x32), tensor_view<7x32xf32, strides=[32,1]>>, tile<i64> -> token
    return
  }
}

