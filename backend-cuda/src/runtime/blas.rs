//! cuBLASLt, for kernels that are a plain matmul ([`LibraryCall::MatMul`]): one handle, a
//! workspace per lane (the products of one schedule wave run at once, on streams or graph
//! branches of their own, and a workspace is scratch memory of one product at a time), and a
//! plan (descriptors and the heuristic's algorithm) per shape.
//!
//! Row-major `C[m, n] = A[m, k] @ B[k, n]` is column-major `C^T = B^T @ A^T`, so cuBLASLt is
//! asked for that product with no transposes (a B stored transposed, `[n, k]` row-major, is
//! column-major `B` itself, and its operand is transposed); batches are strided (B's stride is 0 when it is
//! shared). 16-bit floats accumulate in `f32`, `f32` computes in `f32` (no TF32), `f64` in
//! `f64`, as the kernels' tile IR does.

use super::driver::{DriverResult, LaneWorkspaces, Stream};
use cudarc::cublaslt::{result, sys};
use std::collections::HashMap;
use std::ffi::c_void;
use tir_graph::DType;

/// `cublasOperation_t`'s transpose.
const CUBLAS_OP_T: i32 = 1;

/// The workspace cuBLASLt may use (32 MiB, what it asks for on Hopper).
const WORKSPACE: usize = 32 << 20;

fn call<T>(what: &str, r: Result<T, result::CublasError>) -> DriverResult<T> {
    r.map_err(|e| format!("{what} failed: {:?}", e.0))
}

/// One shape of matmul.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulShape {
    pub dtype: DType,
    pub batch: u64,
    pub m: u64,
    pub k: u64,
    pub n: u64,
    pub b_batched: bool,
    /// B is stored transposed, `[n, k]` row-major.
    pub b_transposed: bool,
}

/// The device addresses of a product's row-major buffers: `c = a @ b`, plus `residual` (of
/// `c`'s shape) where given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulOperands {
    pub a: u64,
    pub b: u64,
    pub c: u64,
    pub residual: Option<u64>,
}

struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    algo: sys::cublasLtMatmulAlgo_t,
    f64_scale: bool,
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created once, in `Blas::plan`.
        unsafe {
            let _ = result::destroy_matmul_desc(self.desc);
            for l in self.layouts {
                let _ = result::destroy_matrix_layout(l);
            }
        }
    }
}

/// Whether this process can load cuBLASLt, or why not.
pub fn present() -> DriverResult<()> {
    // SAFETY: only probes whether the library can be loaded.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err("cuBLASLt (libcublasLt.so) was not found".into())
    }
}

/// A cuBLASLt handle with its workspaces and plans.
pub struct Blas {
    handle: sys::cublasLtHandle_t,
    workspaces: LaneWorkspaces,
    plans: HashMap<MatmulShape, Plan>,
}

impl Drop for Blas {
    fn drop(&mut self) {
        self.plans.clear();
        // SAFETY: created once in `new`.
        let _ = unsafe { result::destroy_handle(self.handle) };
    }
}

fn data_type(dtype: DType) -> Option<sys::cudaDataType> {
    Some(match dtype {
        DType::F16 => sys::cudaDataType::CUDA_R_16F,
        DType::BF16 => sys::cudaDataType::CUDA_R_16BF,
        DType::F32 => sys::cudaDataType::CUDA_R_32F,
        DType::F64 => sys::cudaDataType::CUDA_R_64F,
        _ => return None,
    })
}

/// A column-major `rows x cols` matrix with leading dimension `rows`, `batch` of them `stride`
/// elements apart.
fn layout(
    ty: sys::cudaDataType,
    rows: u64,
    cols: u64,
    batch: u64,
    stride: i64,
) -> DriverResult<sys::cublasLtMatrixLayout_t> {
    let l = call(
        "cublasLtMatrixLayoutCreate",
        result::create_matrix_layout(ty, rows, cols, rows as i64),
    )?;
    let count = batch as i32;
    // SAFETY: the attributes are an i32 and an i64, passed with their sizes.
    unsafe {
        call(
            "cublasLtMatrixLayoutSetAttribute(batch count)",
            result::set_matrix_layout_attribute(
                l,
                sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                &count as *const i32 as *const c_void,
                4,
            ),
        )?;
        call(
            "cublasLtMatrixLayoutSetAttribute(batch stride)",
            result::set_matrix_layout_attribute(
                l,
                sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                &stride as *const i64 as *const c_void,
                8,
            ),
        )?;
    }
    Ok(l)
}

impl Blas {
    pub fn new() -> DriverResult<Blas> {
        present()?;
        Ok(Blas {
            handle: call("cublasLtCreate", result::create_handle())?,
            workspaces: LaneWorkspaces::new(WORKSPACE),
            plans: HashMap::new(),
        })
    }

    /// Makes the plan of shape `s` now (before a graph capture, which must not allocate).
    pub fn prepare(&mut self, s: MatmulShape) -> DriverResult<()> {
        self.plan(s).map(|_| ())
    }

    fn plan(&mut self, s: MatmulShape) -> DriverResult<&Plan> {
        if !self.plans.contains_key(&s) {
            let ty = data_type(s.dtype)
                .ok_or_else(|| format!("cuBLASLt matmul of {} is not supported", s.dtype))?;
            let f64_scale = s.dtype == DType::F64;
            let (compute, scale) = if f64_scale {
                (
                    sys::cublasComputeType_t::CUBLAS_COMPUTE_64F,
                    sys::cudaDataType::CUDA_R_64F,
                )
            } else {
                (
                    sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    sys::cudaDataType::CUDA_R_32F,
                )
            };
            let desc = call(
                "cublasLtMatmulDescCreate",
                result::create_matmul_desc(compute, scale),
            )?;
            let b_stride = if s.b_batched { (s.k * s.n) as i64 } else { 0 };
            // Column-major: first operand B^T (n x k), second A^T (k x m), result C^T (n x m).
            // A B stored transposed is a k x n column-major matrix, read transposed.
            let b_layout = if s.b_transposed {
                // SAFETY: the attribute is an i32 (cublasOperation_t) passed with its size.
                unsafe {
                    call(
                        "cublasLtMatmulDescSetAttribute(transa)",
                        result::set_matmul_desc_attribute(
                            desc,
                            sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                            &CUBLAS_OP_T as *const i32 as *const c_void,
                            4,
                        ),
                    )?;
                }
                layout(ty, s.k, s.n, s.batch, b_stride)?
            } else {
                layout(ty, s.n, s.k, s.batch, b_stride)?
            };
            let layouts = [
                b_layout,
                layout(ty, s.k, s.m, s.batch, (s.m * s.k) as i64)?,
                layout(ty, s.n, s.m, s.batch, (s.m * s.n) as i64)?,
            ];
            let pref = call(
                "cublasLtMatmulPreferenceCreate",
                result::create_matmul_pref(),
            )?;
            let bytes = WORKSPACE as u64;
            // SAFETY: the attribute is a u64 passed with its size; every descriptor is live.
            let heuristic = unsafe {
                call(
                    "cublasLtMatmulPreferenceSetAttribute",
                    result::set_matmul_pref_attribute(
                        pref,
                        sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                        &bytes as *const u64 as *const c_void,
                        8,
                    ),
                )
                .and_then(|()| {
                    call(
                        "cublasLtMatmulAlgoGetHeuristic",
                        result::get_matmul_algo_heuristic(
                            self.handle,
                            desc,
                            layouts[0],
                            layouts[1],
                            layouts[2],
                            layouts[2],
                            pref,
                        ),
                    )
                })
            };
            // SAFETY: created above, destroyed once.
            let _ = unsafe { result::destroy_matmul_pref(pref) };
            let mut plan = Plan {
                desc,
                layouts,
                // SAFETY: an opaque C struct of integers, for which all zeros is a valid value.
                algo: unsafe { std::mem::zeroed() },
                f64_scale,
            };
            // On an error the plan is dropped here, destroying its descriptors.
            plan.algo = heuristic?.algo;
            self.plans.insert(s, plan);
        }
        self.plans
            .get(&s)
            .ok_or_else(|| "cuBLASLt plan missing".to_string())
    }

    /// Makes the workspaces of lanes `0..lanes` now (a graph capture may not allocate).
    pub fn reserve_lanes(&mut self, lanes: usize) -> DriverResult<()> {
        self.workspaces.reserve(lanes)
    }

    /// Enqueues `c = a @ b (+ residual)` of shape `s` on `stream`, with the workspace of `lane`:
    /// products that may run at the same time need lanes of their own. The residual is
    /// cuBLASLt's `C` with `beta = 1`, added in the accumulator before `c` is rounded.
    pub fn matmul(
        &mut self,
        s: MatmulShape,
        operands: MatmulOperands,
        stream: &Stream,
        lane: usize,
    ) -> DriverResult<()> {
        let MatmulOperands { a, b, c, residual } = operands;
        if s.batch == 0 || s.m == 0 || s.n == 0 {
            return Ok(());
        }
        let workspace = self.workspaces.get(lane)?;
        let handle = self.handle;
        let plan = self.plan(s)?;
        let beta_value = if residual.is_some() { 1.0 } else { 0.0 };
        let (one32, beta32, one64, beta64) = (1f32, beta_value as f32, 1f64, beta_value);
        let (alpha, beta): (*const c_void, *const c_void) = if plan.f64_scale {
            (&one64 as *const f64 as _, &beta64 as *const f64 as _)
        } else {
            (&one32 as *const f32 as _, &beta32 as *const f32 as _)
        };
        // SAFETY: the addresses are device buffers of the shapes in `s`; the scalars live
        // through the call; the workspace is WORKSPACE bytes.
        unsafe {
            call(
                "cublasLtMatmul",
                result::matmul(
                    handle,
                    plan.desc,
                    alpha,
                    beta,
                    b as *const c_void,
                    plan.layouts[0],
                    a as *const c_void,
                    plan.layouts[1],
                    residual.unwrap_or(c) as *const c_void,
                    plan.layouts[2],
                    c as *mut c_void,
                    plan.layouts[2],
                    &plan.algo,
                    workspace as *mut c_void,
                    WORKSPACE,
                    stream.0 as sys::cudaStream_t,
                ),
            )
        }
    }
}
