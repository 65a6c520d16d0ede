// kernel k0_gather
cuda_tile.module @tir {
  entry @tir_gather(%0: tile<ptr<i64>>, %1: tile<ptr<f32>>, %2: tile<ptr<f32>>, %3: tile<i64>, %4: tile<i64>) {
    %5 = assume div_by<16>, %0 : tile<ptr<i64>>
    %6 = assume div_by<16>, %1 : tile<ptr<f32>>
    %7 = assume div_by<16>, %2 : tile<ptr<f32>>
    %8, %9, %10 = get_tile_block_id : tile<i32>
    %11 = exti %8 unsigned : tile<i32> -> tile<i64>
    %12 = divi %11, %4 signed : tile<i64>
    %13 = remi %11, %4 signed : tile<i64>
    %14 = constant <i64: 7> : tile<i64>
    %15 = constant <i64: 32> : tile<i64>
    %16 = constant <i64: 0> : tile<i64>
    %17 = constant <i64: 1> : tile<i64>
    %18 = constant <i64: 100> : tile<i64>
    %19 = constant <i64: 32> : tile<i64>
    %20 = muli %13, %15 : tile<i64>
    %21 = make_token : token
    %22 = constant <i64: 0> : tile<i64>
    %23 = constant <i64: 1> : tile<i64>
    %24 = make_tensor_view %5, shape = [7, 1], strides = [1, 1] : tensor_view<7x1xi64, strides=[1,1]>
    %25 = make_partition_view %24 : partition_view<tile=(8x1), padding_value = zero, tensor_view<7x1xi64, strides=[1,1]>>
    %26, %27 = load_view_tko weak %25[%12, %22] optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : partition_view<tile=(8x1), padding_value = zero, tensor_view<7x1xi64, strides=[1,1]>>, tile<i64> -> tile<8x1xi64>, token
    %28 = broadcast %26 : tile<8x1xi64> -> tile<8x32xi64>
    %29 = constant <i64: 32> : tile<i64>
    %30 = muli %13, %29 : tile<i64>
    %31 = reshape %30 : tile<i64> -> tile<1x1xi64>
    %32 = broadcast %31 : tile<1x1xi64> -> tile<1x32xi64>
    %33 = iota : tile<32xi64>
    %34 = reshape %33 : tile<32xi64> -> tile<1x32xi64>
    %35 = addi %32, %34 : tile<1x32xi64>
    %36 = reshape %15 : tile<i64> -> tile<1x1xi64>
    %37 = broadcast %36 : tile<1x1xi64> -> tile<1x32xi64>
    %38 = cmpi less_than %35, %37, signed : tile<1x32xi64> -> tile<1x32xi1>
    %39 = broadcast %38 : tile<1x32xi1> -> tile<8x32xi1>
    %40 = constant <i64: 0> : tile<i64>
    %41 = reshape %40 : tile<i64> -> tile<1x1xi64>
    %42 = broadcast %41 : tile<1x1xi64> -> tile<8x32xi64>
    %43 = select %39, %28, %42 : tile<8x32xi1>, tile<8x32xi64>
    %44 = reshape %16 : tile<i64> -> tile<1x1xi64>
    %45 = broadcast %44 : tile<1x1xi64> -> tile<8x32xi64>
    %46 = reshape %20 : tile<i64> -> tile<1x1xi64>
    %47 = broadcast %46 : tile<1x1xi64> -> tile<1x32xi64>
    %48 = iota : tile<32xi64>
    %49 = reshape %48 : tile<32xi64> -> tile<1x32xi64>
    %50 = addi %47, %49 : tile<1x32xi64>
    %51 = broadcast %50 : tile<1x32xi64> -> tile<8x32xi64>
    %52 = reshape %17 : tile<i64> -> tile<1x1xi64>
    %53 = broadcast %52 : tile<1x1xi64> -> tile<8x32xi64>
    %54 = muli %51, %53 : tile<8x32xi64>
    %55 = addi %45, %54 : tile<8x32xi64>
    %56 = constant <i1: 1> : tile<i1>
    %57 = reshape %56 : tile<i1> -> tile<1x1xi1>
    %58 = broadcast %57 : tile<1x1xi1> -> tile<8x32xi1>
    %59 = constant <i64: 0> : tile<i64>
    %60 = reshape %59 : tile<i64> -> tile<1x1xi64>
    %61 = broadcast %60 : tile<1x1xi64> -> tile<8x32xi64>
    %62 = reshape %18 : tile<i64> -> tile<1x1xi64>
    %63 = broadcast %62 : tile<1x1xi64> -> tile<8x32xi64>
    %64 = cmpi greater_than_or_equal %43, %61, signed : tile<8x32xi64> -> tile<8x32xi1>
    %65 = cmpi less_than %43, %63, signed : tile<8x32xi64> -> tile<8x32xi1>
    %66 = andi %64, %65 : tile<8x32xi1>
    %67 = andi %58, %66 : tile<8x32xi1>
    %68 = reshape %19 : tile<i64> -> tile<1x1xi64>
    %69 = broadcast %68 : tile<1x1xi64> -> tile<8x32xi64>
    %70 = muli %43, %69 : tile<8x32xi64>
    %71 = constant <i64: 0> : tile<i64>
    %72 = reshape %71 : tile<i64> -> tile<1x1xi64>
    %73 = broadcast %72 : tile<1x1xi64> -> tile<8x32xi64>
    %74 = reshape %15 : tile<i64> -> tile<1x1xi64>
    %75 = broadcast %74 : tile<1x1xi64> -> tile<8x32xi64>
    %76 = cmpi greater_than_or_equal %55, %73, signed : tile<8x32xi64> -> tile<8x32xi1>
    %77 = cmpi less_than %55, %75, signed : tile<8x32xi64> -> tile<8x32xi1>
    %78 = andi %76, %77 : tile<8x32xi1>
    %79 = andi %67, %78 : tile<8x32xi1>
    %80 = reshape %17 : tile<i64> -> tile<1x1xi64>
    %81 = broadcast %80 : tile<1x1xi64> -> tile<8x32xi64>
    %82 = muli %55, %81 : tile<8x32xi64>
    %83 = addi %70, %82 : tile<8x32xi64>
    %84 = constant <i64: 0> : tile<i64>
    %85 = reshape %84 : tile<i64> -> tile<1x1xi64>
    %86 = broadcast %85 : tile<1x1xi64> -> tile<8x32xi64>
    %87 = select %79, %83, %86 : tile<8x32xi1>, tile<8x32xi64>
    %88 = reshape %6 : tile<ptr<f32>> -> tile<1x1xptr<f32>>
    %89 = broadcast %88 : tile<1x1xptr<f32>> -> tile<8x32xptr<f32>>
    %90 = offset %89, %87 : tile<8x32xptr<f32>>, tile<8x32xi64> -> tile<8x32xptr<f32>>
    %91 = constant <f32: 0.0> : tile<f32>
    %92 = reshape %91 : tile<f32> -> tile<1x1xf32>
    %93 = broadcast %92 : tile<1x1xf32> -> tile<8x32xf32>
    %94, %95 = load_ptr_tko weak %90, %79, %93 : tile<8x32xptr<f32>>, tile<8x32xi1>, tile<8x32xf32> -> tile<8x32xf32>, token
    %96 = make_tensor_view %7, shape = [7, 32], strides = [32, 1] : tensor_view<7x32xf32, strides=[32,1]>
    %97 = make_partition_view %96 : partition_view<tile=(8x32), tensor_view<7x32xf32, strides=[32,1]>>
    %98 = store_view_tko weak %94, %97[%12, %13] token = %21 optimization_hints = #cuda_tile.optimization_hints<default = {allow_tma = false}> : tile<8x32xf32>, partition_view<tile=(8x32), tensor_view<7x32xf32, strides=[32,1]>>, tile<i64> -> token
    return
  }
}

