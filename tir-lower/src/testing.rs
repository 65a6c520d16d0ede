//! Running executables on `f64` values, for tests and the conformance comparisons against the
//! oracle: sources are given as [`F64Tensor`]s, inputs and parameters together as the oracle
//! takes them, and outputs and states come back as [`F64Tensor`]s. Runs themselves take typed
//! tensors ([`crate::Executable`]); this only converts at the edges.

use crate::{BackendError, Executable, TensorRef};
use std::collections::BTreeMap;
use tir_graph::eval::F64Tensor;
use tir_graph::HostTensor;

/// What [`RunF64::run_f64`] returns.
#[derive(Clone, Debug, PartialEq)]
pub struct F64Outputs {
    /// Each output, by name, as `f64` values.
    pub outputs: BTreeMap<String, F64Tensor>,
}

/// [`Executable`]s run on `f64` values (see the module doc).
pub trait RunF64 {
    /// Sets each parameter of `sources` and runs with the rest as inputs.
    fn run_f64(
        &mut self,
        sources: &BTreeMap<String, F64Tensor>,
    ) -> Result<F64Outputs, BackendError>;

    /// Like [`RunF64::run_f64`] through device memory: each parameter and input is copied to
    /// the device first ([`Executable::to_device`]), parameters are set from those device
    /// tensors, the run leaves its outputs on the device ([`Executable::run_on_device`]), and
    /// they are copied back ([`crate::DeviceTensor::to_host`]).
    fn run_f64_on_device(
        &mut self,
        sources: &BTreeMap<String, F64Tensor>,
    ) -> Result<F64Outputs, BackendError>;

    /// The states as `f64` values (none where they cannot be read).
    fn states_f64(&self) -> BTreeMap<String, F64Tensor>;
}

/// `sources` as host tensors, split into parameters of `exe` and inputs.
type Split = (
    Vec<(String, HostTensor<'static>)>,
    Vec<(String, HostTensor<'static>)>,
);

fn split<E: Executable + ?Sized>(
    exe: &E,
    sources: &BTreeMap<String, F64Tensor>,
) -> Result<Split, BackendError> {
    let (mut parameters, mut inputs) = (Vec::new(), Vec::new());
    for (name, t) in sources {
        let host = HostTensor::from_f64(t)
            .map_err(|e| BackendError::BadInput(format!("tensor {name:?}: {e}")))?;
        if exe.signature().parameters.iter().any(|(n, _)| n == name) {
            parameters.push((name.clone(), host));
        } else {
            inputs.push((name.clone(), host));
        }
    }
    Ok((parameters, inputs))
}

impl<E: Executable + ?Sized> RunF64 for E {
    fn run_f64(
        &mut self,
        sources: &BTreeMap<String, F64Tensor>,
    ) -> Result<F64Outputs, BackendError> {
        let (parameters, inputs) = split(self, sources)?;
        for (name, t) in &parameters {
            self.set_parameter(name, TensorRef::Host(t))?;
        }
        let refs: Vec<(&str, TensorRef<'_>)> = inputs
            .iter()
            .map(|(n, t)| (n.as_str(), TensorRef::Host(t)))
            .collect();
        let outputs = self.run(&refs)?;
        Ok(F64Outputs {
            outputs: outputs.into_iter().map(|(n, t)| (n, t.to_f64())).collect(),
        })
    }

    fn run_f64_on_device(
        &mut self,
        sources: &BTreeMap<String, F64Tensor>,
    ) -> Result<F64Outputs, BackendError> {
        let (parameters, inputs) = split(self, sources)?;
        for (name, t) in &parameters {
            let on_device = self.to_device(t)?;
            self.set_parameter(name, TensorRef::Device(&on_device))?;
        }
        let on_device = inputs
            .iter()
            .map(|(n, t)| Ok((n.as_str(), self.to_device(t)?)))
            .collect::<Result<Vec<_>, BackendError>>()?;
        let refs: Vec<(&str, TensorRef<'_>)> = on_device
            .iter()
            .map(|(n, t)| (*n, TensorRef::Device(t)))
            .collect();
        let outputs = self.run_on_device(&refs)?;
        let mut host = BTreeMap::new();
        for (name, t) in outputs {
            host.insert(name, t.to_host()?.to_f64());
        }
        Ok(F64Outputs { outputs: host })
    }

    fn states_f64(&self) -> BTreeMap<String, F64Tensor> {
        self.states()
            .map(|s| s.into_iter().map(|(n, t)| (n, t.to_f64())).collect())
            .unwrap_or_default()
    }
}
