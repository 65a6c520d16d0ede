//! Users' kernels as graph ops: what the graph knows of a kernel written against the tile IR.
//!
//! The graph sits below lowering, so it cannot hold a tile program; a [`CustomKernel`] holds
//! everything the graph stages need and the program as an opaque [`KernelBody`] that
//! `tir_lower::custom` encodes and decodes:
//! - its **signature**: inputs (dtype, dims with symbols of the kernel's own) and outputs (dtype,
//!   dims over the inputs' symbols, and the *partition*: the tile each program writes, from
//!   which the grid follows);
//! - its **safety**: [`Safety::Safe`] kernels must be proven by the legality pass like generated
//!   ones; [`Safety::Unsafe`] carries the author's contract;
//! - its **reference**: a [`Graph`] of IR ops with one input per kernel input (same names, dtypes
//!   and dims) and one output per kernel output (same names), which the f64 oracle evaluates in
//!   place of the kernel;
//! - its **body**: versioned bytes, fingerprinted with everything else.
//!
//! A kernel with several outputs is one [`crate::Op::Custom`] node per output (a node has one
//! value); each names the output it is. An output may update input 0 in place
//! ([`CustomOutput::updates`]): its node is then a state update of the state given as operand 0,
//! ordered like `state_write_slice`, and its reference output is the state's whole new value;
//! it writes all of the state, or a slice of it at a run-time position ([`StateSlice`]).
//! Guarantees of [`CustomKernel::new`]: names are unique, every output dim is static or a symbol
//! of an input, every tile dim is a power of two and as many as the output's rank, at most one
//! output updates an input, and that is input 0 with the output's dtype and dims, and the
//! reference's inputs and outputs match the signature.

use crate::{DType, Dim, Graph, GraphData, TensorType};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// An input of a custom kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomInput {
    /// Its name (in messages, and the reference graph's input of this name).
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Its dims: static, or a symbol bound by the operand it is given.
    pub dims: Vec<Dim>,
}

/// An output of a custom kernel, with its partition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomOutput {
    /// Its name (the reference graph's output of this name).
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Its dims: static, or symbols of the inputs.
    pub dims: Vec<Dim>,
    /// The tile each program writes, one power of two per axis: the grid is
    /// `ceil(dims / tile)` programs.
    pub tile: Vec<u64>,
    /// The input this output updates in place, if any: the output is that input's new value
    /// (same dtype and dims), the input must be a graph state, and the node is a state update
    /// like `state_write_slice` (its buffer is the state's). Only input 0 can be updated: a
    /// state update names its state as operand 0.
    pub updates: Option<usize>,
    /// With [`CustomOutput::updates`]: the part of the state the kernel writes, when not all of
    /// it. The partition then tiles that slice ([`CustomOutput::written_dims`]), and the rest of
    /// the state keeps its value.
    pub slice: Option<StateSlice>,
}

/// A slice of a state at a run-time position, what an in-place output writes: `len` elements
/// along `axis` from the position held by input `start` (an `i32`/`i64` scalar), every other
/// axis whole, as `state_write_slice` writes (and, like it, checked to lie inside the state
/// before each launch).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateSlice {
    /// The axis sliced.
    pub axis: usize,
    /// Elements along it: a size or a symbol of an input.
    pub len: Dim,
    /// The input holding the first element's position.
    pub start: usize,
}

impl CustomOutput {
    /// The dims the partition tiles: the output's, or its [`StateSlice`]'s.
    pub fn written_dims(&self) -> Vec<Dim> {
        let mut dims = self.dims.clone();
        if let Some(slice) = &self.slice {
            if let Some(d) = dims.get_mut(slice.axis) {
                *d = slice.len.clone();
            }
        }
        dims
    }
}

/// Whether the legality pass must prove the kernel's writes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Safety {
    /// Proven like a generated kernel, or refused.
    Safe,
    /// Not proven: the author states what makes its writes disjoint and covering.
    Unsafe {
        /// The author's contract, in words.
        contract: String,
    },
}

/// A kernel's tile program, encoded by `tir_lower::custom` (opaque here).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KernelBody {
    /// The encoding's version; a reader refuses a version it does not know.
    pub version: u32,
    /// The encoded program.
    pub bytes: Vec<u8>,
}

/// A user's kernel: signature, safety, reference and body (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomKernel {
    name: String,
    inputs: Vec<CustomInput>,
    outputs: Vec<CustomOutput>,
    safety: Safety,
    reference: GraphData,
    body: KernelBody,
}

/// Why a custom kernel cannot be declared, or applied to operands; names the kernel.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CustomError {
    /// The declaration is inconsistent.
    #[error("custom kernel {kernel}: {reason}")]
    Declaration {
        /// The kernel's name.
        kernel: String,
        /// What is wrong.
        reason: String,
    },
    /// An operand does not have the type the kernel takes.
    #[error("custom kernel {kernel}: operand {index} ({name}) is {got}, the kernel takes {want}")]
    Operand {
        /// The kernel's name.
        kernel: String,
        /// The operand's position.
        index: usize,
        /// The input's name.
        name: String,
        /// The operand's type.
        got: TensorType,
        /// The type the kernel declares (symbols as declared).
        want: String,
    },
}

impl CustomKernel {
    /// Declares a kernel, checking the guarantees of the module doc.
    pub fn new(
        name: &str,
        inputs: Vec<CustomInput>,
        outputs: Vec<CustomOutput>,
        safety: Safety,
        reference: &Graph,
        body: KernelBody,
    ) -> Result<CustomKernel, CustomError> {
        let kernel = CustomKernel {
            name: name.to_string(),
            inputs,
            outputs,
            safety,
            reference: reference.to_data(),
            body,
        };
        kernel.check(reference)?;
        Ok(kernel)
    }

    fn fail(&self, reason: String) -> CustomError {
        CustomError::Declaration {
            kernel: self.name.clone(),
            reason,
        }
    }

    fn check(&self, reference: &Graph) -> Result<(), CustomError> {
        if self.outputs.is_empty() {
            return Err(self.fail("it declares no output".into()));
        }
        let ident =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let all = self
            .inputs
            .iter()
            .map(|i| &i.name)
            .chain(self.outputs.iter().map(|o| &o.name));
        if let Some(bad) = std::iter::once(&self.name).chain(all).find(|s| !ident(s)) {
            return Err(self.fail(format!(
                "the name `{bad}` is not made of ASCII letters, digits and `_` (it names generated code)"
            )));
        }
        let mut names: Vec<&str> = self.inputs.iter().map(|i| i.name.as_str()).collect();
        names.extend(self.outputs.iter().map(|o| o.name.as_str()));
        let mut sorted = names.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(self.fail(format!("the name `{}` is used twice", w[0])));
        }
        let symbols: Vec<String> = self
            .inputs
            .iter()
            .flat_map(|i| i.dims.iter())
            .flat_map(Dim::symbols)
            .collect();
        for input in &self.inputs {
            if input.dims.iter().any(|d| matches!(d, Dim::Expr(_))) {
                return Err(self.fail(format!(
                    "input {} has a dim expression; declare symbols or sizes",
                    input.name
                )));
            }
        }
        for out in &self.outputs {
            self.check_output(out, &symbols)?;
        }
        self.check_in_place()?;
        self.check_reference(reference)
    }

    /// At most one output updates an input in place, and that is input 0, of its type.
    fn check_in_place(&self) -> Result<(), CustomError> {
        let updating: Vec<&CustomOutput> = self
            .outputs
            .iter()
            .filter(|o| o.updates.is_some())
            .collect();
        if updating.len() > 1 {
            return Err(self.fail(format!(
                "outputs {} and {} both update an input in place; a state has one update",
                updating[0].name, updating[1].name
            )));
        }
        let Some(out) = updating.first() else {
            return Ok(());
        };
        let Some(input) = self.inputs.first().filter(|_| out.updates == Some(0)) else {
            return Err(self.fail(format!(
                "output {} updates input {:?} in place; only input 0 can be updated (a state \
                 update names its state as operand 0)",
                out.name, out.updates
            )));
        };
        if input.dtype != out.dtype || input.dims != out.dims {
            return Err(self.fail(format!(
                "output {} updates input {} in place but is not of its type ({}{:?}, not {}{:?})",
                out.name, input.name, out.dtype, out.dims, input.dtype, input.dims
            )));
        }
        out.slice
            .as_ref()
            .map_or(Ok(()), |slice| self.check_slice(out, slice))
    }

    /// A [`StateSlice`] is along an axis of the state, of a size or an input's symbol, from a
    /// scalar integer input other than the state.
    fn check_slice(&self, out: &CustomOutput, slice: &StateSlice) -> Result<(), CustomError> {
        if slice.axis >= out.dims.len() || matches!(slice.len, Dim::Expr(_)) {
            return Err(self.fail(format!(
                "output {} writes a slice of length {} along axis {} of a rank-{} state; the \
                 axis must be the state's and the length a size or a symbol",
                out.name,
                slice.len,
                slice.axis,
                out.dims.len()
            )));
        }
        let position = self.inputs.get(slice.start).filter(|i| {
            slice.start != 0 && i.dims.is_empty() && matches!(i.dtype, DType::I32 | DType::I64)
        });
        if position.is_none() {
            return Err(self.fail(format!(
                "output {} writes a slice from the position in input {}; that must be an i32 \
                 or i64 scalar input other than the state",
                out.name, slice.start
            )));
        }
        Ok(())
    }

    fn check_output(&self, out: &CustomOutput, symbols: &[String]) -> Result<(), CustomError> {
        if let Some(d) = out.dims.iter().find(|d| match d {
            Dim::Static(_) => false,
            Dim::Symbolic(s) => !symbols.contains(s),
            Dim::Expr(_) => true,
        }) {
            return Err(self.fail(format!(
                "output {} has dim {d}, neither a size nor a symbol of an input",
                out.name
            )));
        }
        if let Some(slice) = out.slice.as_ref().filter(|s| match &s.len {
            Dim::Symbolic(name) => !symbols.contains(name),
            _ => false,
        }) {
            return Err(self.fail(format!(
                "output {} writes a slice of length {}, neither a size nor a symbol of an input",
                out.name, slice.len
            )));
        }
        if out.slice.is_some() && out.updates.is_none() {
            return Err(self.fail(format!(
                "output {} writes a slice of a state but updates no input in place",
                out.name
            )));
        }
        let pow2 = out.tile.iter().all(|t| t.is_power_of_two());
        if out.tile.len() != out.dims.len() || !pow2 {
            return Err(self.fail(format!(
                "output {} of rank {} has the tile {:?}; a tile has one power of two per axis",
                out.name,
                out.dims.len(),
                out.tile
            )));
        }
        Ok(())
    }

    fn check_reference(&self, reference: &Graph) -> Result<(), CustomError> {
        if !reference.parameters().is_empty() || !reference.states().is_empty() {
            return Err(self.fail(
                "the reference has parameters or states; it computes from the inputs alone".into(),
            ));
        }
        let inputs = reference.inputs();
        if inputs.len() != self.inputs.len() {
            return Err(self.fail(format!(
                "the reference has {} inputs, the kernel {}",
                inputs.len(),
                self.inputs.len()
            )));
        }
        for input in &self.inputs {
            let want = TensorType::new(
                input.dtype,
                crate::Shape::new(input.dims.clone())
                    .map_err(|e| self.fail(format!("input {}: {e}", input.name)))?,
            );
            match reference.source(&input.name) {
                Some(id) if reference.ty(id) == &want => {}
                _ => {
                    return Err(self.fail(format!(
                        "the reference has no input `{}` of type {want}",
                        input.name
                    )))
                }
            }
        }
        for out in &self.outputs {
            let found = reference.outputs().iter().find(|(n, _)| *n == out.name);
            let ok = found.is_some_and(|(_, id)| {
                let ty = reference.ty(*id);
                ty.dtype == out.dtype && ty.shape.dims() == out.dims.as_slice()
            });
            if !ok {
                return Err(self.fail(format!(
                    "the reference has no output `{}` of type {}{:?}",
                    out.name, out.dtype, out.dims
                )));
            }
        }
        Ok(())
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its inputs, in operand order.
    pub fn inputs(&self) -> &[CustomInput] {
        &self.inputs
    }

    /// Its outputs.
    pub fn outputs(&self) -> &[CustomOutput] {
        &self.outputs
    }

    /// The output that updates input 0 in place, if any ([`CustomOutput::updates`]).
    pub fn in_place_output(&self) -> Option<usize> {
        self.outputs.iter().position(|o| o.updates.is_some())
    }

    /// Whether its writes must be proven.
    pub fn safety(&self) -> &Safety {
        &self.safety
    }

    /// The reference graph's data (rebuilt and verified by [`CustomKernel::reference`]).
    pub fn reference_data(&self) -> &GraphData {
        &self.reference
    }

    /// The reference graph, verified.
    pub fn reference(&self) -> Result<Graph, crate::GraphError> {
        Graph::from_data(self.reference.clone())
    }

    /// Its encoded tile program.
    pub fn body(&self) -> &KernelBody {
        &self.body
    }

    /// Binds the kernel's symbols by unifying its inputs with `operands`: each symbol gets the
    /// operand's dim where it first appears, and every later appearance must equal it.
    pub fn bind(&self, operands: &[&TensorType]) -> Result<BTreeMap<String, Dim>, CustomError> {
        if operands.len() != self.inputs.len() {
            return Err(self.fail(format!(
                "takes {} operands, got {}",
                self.inputs.len(),
                operands.len()
            )));
        }
        let mut bound: BTreeMap<String, Dim> = BTreeMap::new();
        for (index, (input, got)) in self.inputs.iter().zip(operands).enumerate() {
            let mismatch = || CustomError::Operand {
                kernel: self.name.clone(),
                index,
                name: input.name.clone(),
                got: (*got).clone(),
                want: format!(
                    "{}[{}]",
                    input.dtype,
                    input
                        .dims
                        .iter()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let dims = got.shape.dims();
            if got.dtype != input.dtype || dims.len() != input.dims.len() {
                return Err(mismatch());
            }
            for (want, have) in input.dims.iter().zip(dims) {
                let ok = match want {
                    Dim::Symbolic(s) => bound.entry(s.clone()).or_insert(have.clone()) == have,
                    d => d == have,
                };
                if !ok {
                    return Err(mismatch());
                }
            }
        }
        Ok(bound)
    }

    /// The type of output `output` under the binding `bound` of [`CustomKernel::bind`].
    pub fn output_type(
        &self,
        output: usize,
        bound: &BTreeMap<String, Dim>,
    ) -> Result<TensorType, CustomError> {
        let out = self.outputs.get(output).ok_or_else(|| {
            self.fail(format!(
                "has {} outputs, not an output {output}",
                self.outputs.len()
            ))
        })?;
        let dims: Vec<Dim> = out.dims.iter().map(|d| bind_dim(d, bound)).collect();
        let shape =
            crate::Shape::new(dims).map_err(|e| self.fail(format!("output {}: {e}", out.name)))?;
        Ok(TensorType::new(out.dtype, shape))
    }

    /// A hash of everything the kernel is (what a kernel cache keys on with the body).
    pub fn fingerprint(&self) -> u64 {
        let bytes = bincode::serde::encode_to_vec(self, bincode::config::standard())
            .expect("a custom kernel always encodes");
        crate::file::checksum(&bytes)
    }
}

/// `dim` with a kernel's symbols replaced by their binding ([`CustomKernel::bind`]).
pub fn bind_dim(dim: &Dim, bound: &BTreeMap<String, Dim>) -> Dim {
    match dim {
        Dim::Symbolic(s) => bound.get(s).cloned().unwrap_or_else(|| dim.clone()),
        d => d.clone(),
    }
}

/// A shared custom kernel with its fingerprint, as [`crate::Op::Custom`] holds it: equal,
/// ordered and hashed by content (the fingerprint first, so comparisons are cheap).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(from = "CustomKernel", into = "CustomKernel")]
pub struct CustomRef {
    kernel: Arc<CustomKernel>,
    fingerprint: u64,
}

impl CustomRef {
    /// Shares `kernel`.
    pub fn new(kernel: CustomKernel) -> CustomRef {
        let fingerprint = kernel.fingerprint();
        CustomRef {
            kernel: Arc::new(kernel),
            fingerprint,
        }
    }

    /// The kernel.
    pub fn kernel(&self) -> &CustomKernel {
        &self.kernel
    }

    /// Its fingerprint ([`CustomKernel::fingerprint`]).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

impl From<CustomKernel> for CustomRef {
    fn from(kernel: CustomKernel) -> Self {
        CustomRef::new(kernel)
    }
}

impl From<CustomRef> for CustomKernel {
    fn from(r: CustomRef) -> Self {
        Arc::unwrap_or_clone(r.kernel)
    }
}

impl PartialEq for CustomRef {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint
            && (Arc::ptr_eq(&self.kernel, &other.kernel) || self.kernel == other.kernel)
    }
}

impl Eq for CustomRef {}

impl Hash for CustomRef {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.fingerprint.hash(state);
    }
}

impl PartialOrd for CustomRef {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for CustomRef {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let bytes = |k: &CustomKernel| {
            bincode::serde::encode_to_vec(k, bincode::config::standard()).unwrap_or_default()
        };
        (self.fingerprint, &self.kernel.name)
            .cmp(&(other.fingerprint, &other.kernel.name))
            .then_with(|| {
                if self == other {
                    std::cmp::Ordering::Equal
                } else {
                    bytes(&self.kernel).cmp(&bytes(&other.kernel))
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{shape, GraphBuilder};

    /// `add(a: f32[n, m], b: f32[n, m]) -> y: f32[n, m]` in tiles of `tile`.
    fn adder(tile: Vec<u64>, out_dims: Vec<Dim>) -> Result<CustomKernel, CustomError> {
        let g = GraphBuilder::new();
        let a = g.input("a", DType::F32, shape!["n", "m"]).unwrap();
        let b = g.input("b", DType::F32, shape!["n", "m"]).unwrap();
        g.output("y", &a.add(&b).unwrap()).unwrap();
        let input = |name: &str| CustomInput {
            name: name.into(),
            dtype: DType::F32,
            dims: vec![Dim::from("n"), Dim::from("m")],
        };
        CustomKernel::new(
            "add2",
            vec![input("a"), input("b")],
            vec![CustomOutput {
                name: "y".into(),
                dtype: DType::F32,
                dims: out_dims,
                tile,
                updates: None,
                slice: None,
            }],
            Safety::Safe,
            &g.finish().unwrap(),
            KernelBody {
                version: 1,
                bytes: vec![1, 2, 3],
            },
        )
    }

    fn nm() -> Vec<Dim> {
        vec![Dim::from("n"), Dim::from("m")]
    }

    #[test]
    fn declarations_are_checked() {
        assert!(adder(vec![1, 64], nm()).is_ok());
        let err = adder(vec![1, 48], nm()).unwrap_err().to_string();
        assert!(
            err.contains("custom kernel add2: output y of rank 2 has the tile [1, 48]"),
            "{err}"
        );
        let err = adder(vec![1, 64], vec![Dim::from("n"), Dim::from("k")]).unwrap_err();
        assert!(
            err.to_string().contains("neither a size nor a symbol"),
            "{err}"
        );
        let err = adder(vec![1, 64], vec![Dim::from("n"), Dim::Static(3)]).unwrap_err();
        assert!(
            err.to_string().contains("the reference has no output `y`"),
            "{err}"
        );
    }

    /// A kernel updating `cache: f32[4, 8]` in the slice `slice`, with `updates`, from inputs
    /// `cache`, `row: f32[1, 8]`, `pos: i64[]`.
    fn slice_writer(
        slice: StateSlice,
        updates: Option<usize>,
    ) -> Result<CustomKernel, CustomError> {
        let g = GraphBuilder::new();
        let cache = g.input("cache", DType::F32, shape![4, 8]).unwrap();
        g.input("row", DType::F32, shape![1, 8]).unwrap();
        g.input("pos", DType::I64, crate::Shape::scalar()).unwrap();
        g.output("cache_new", &cache).unwrap();
        let input = |name: &str, dims: &[u64], dtype| CustomInput {
            name: name.into(),
            dtype,
            dims: dims.iter().map(|&d| Dim::Static(d)).collect(),
        };
        CustomKernel::new(
            "writer",
            vec![
                input("cache", &[4, 8], DType::F32),
                input("row", &[1, 8], DType::F32),
                input("pos", &[], DType::I64),
            ],
            vec![CustomOutput {
                name: "cache_new".into(),
                dtype: DType::F32,
                dims: vec![Dim::Static(4), Dim::Static(8)],
                tile: vec![1, 8],
                updates,
                slice: Some(slice),
            }],
            Safety::Safe,
            &g.finish().unwrap(),
            KernelBody {
                version: 1,
                bytes: vec![1],
            },
        )
    }

    #[test]
    fn state_slices_are_checked() {
        let slice = |axis, len: Dim, start| StateSlice { axis, len, start };
        let k = slice_writer(slice(0, Dim::Static(1), 2), Some(0)).unwrap();
        assert_eq!(
            k.outputs()[0].written_dims(),
            vec![Dim::Static(1), Dim::Static(8)]
        );
        for (bad, updates, want) in [
            (
                slice(2, Dim::Static(1), 2),
                Some(0),
                "along axis 2 of a rank-2 state",
            ),
            (
                slice(0, Dim::Static(1), 1),
                Some(0),
                "must be an i32 or i64 scalar input",
            ),
            (
                slice(0, Dim::Static(1), 0),
                Some(0),
                "must be an i32 or i64 scalar input",
            ),
            (
                slice(0, Dim::from("m"), 2),
                Some(0),
                "neither a size nor a symbol",
            ),
            (
                slice(0, Dim::Static(1), 2),
                None,
                "but updates no input in place",
            ),
        ] {
            let err = slice_writer(bad, updates).unwrap_err().to_string();
            assert!(
                err.starts_with("custom kernel writer: output cache_new"),
                "{err}"
            );
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn symbols_bind_by_unification() {
        let k = adder(vec![1, 64], nm()).unwrap();
        let t = |dims: &[u64]| TensorType::new(DType::F32, crate::Shape::of(dims));
        let (a, b) = (t(&[3, 5]), t(&[3, 5]));
        let bound = k.bind(&[&a, &b]).unwrap();
        assert_eq!(k.output_type(0, &bound).unwrap(), t(&[3, 5]));
        let other = t(&[3, 6]);
        let err = k.bind(&[&a, &other]).unwrap_err().to_string();
        assert_eq!(
            err,
            "custom kernel add2: operand 1 (b) is f32[3, 6], the kernel takes f32[n, m]"
        );
        // Equal kernels are equal ops; a different body is a different op.
        assert_eq!(CustomRef::new(k.clone()), CustomRef::new(k.clone()));
        let mut changed = k.clone();
        changed.body.bytes.push(4);
        assert_ne!(
            CustomRef::new(k).fingerprint(),
            CustomRef::new(changed).fingerprint()
        );
    }
}
