//! The schedule: which kernels must finish before each kernel starts, and waves of kernels that
//! are independent of each other (a backend may run a wave on separate streams or as parallel
//! CUDA-graph branches).
//!
//! Dependencies are the data flow between kernels plus, for every buffer a kernel writes in
//! place (a state), an edge from every other kernel that reads that buffer: reads of a state see
//! its value at the start of the run, so they must finish before it is overwritten.

use serde::{Deserialize, Serialize};

/// Execution constraints between the kernels of a program (indices into `Program::kernels`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// For each kernel, the kernels that must finish before it starts (sorted, all earlier).
    pub deps: Vec<Vec<usize>>,
    /// Kernels by wave: a kernel's dependencies are all in earlier waves, and the kernels of one
    /// wave have no dependency between them.
    pub waves: Vec<Vec<usize>>,
}

impl Schedule {
    /// The schedule of `deps` (each kernel's dependencies, all with smaller indices).
    pub fn from_deps(mut deps: Vec<Vec<usize>>) -> Schedule {
        let mut wave_of = vec![0usize; deps.len()];
        for (k, d) in deps.iter_mut().enumerate() {
            d.sort_unstable();
            d.dedup();
            debug_assert!(d.iter().all(|&p| p < k), "dependencies must come first");
            wave_of[k] = d.iter().map(|&p| wave_of[p] + 1).max().unwrap_or(0);
        }
        let mut waves: Vec<Vec<usize>> =
            vec![Vec::new(); wave_of.iter().max().map_or(0, |w| w + 1)];
        for (k, &w) in wave_of.iter().enumerate() {
            waves[w].push(k);
        }
        Schedule { deps, waves }
    }

    /// The wave of each kernel.
    pub fn wave_of(&self) -> Vec<usize> {
        let mut wave_of = vec![0; self.deps.len()];
        for (w, kernels) in self.waves.iter().enumerate() {
            for &k in kernels {
                wave_of[k] = w;
            }
        }
        wave_of
    }

    /// Whether `a` finishes before `b` starts in every execution (a path of dependencies).
    pub fn ordered(&self, a: usize, b: usize) -> bool {
        if a >= b {
            return false;
        }
        let mut reach = vec![false; b + 1];
        reach[a] = true;
        for k in a + 1..=b {
            reach[k] = self.deps[k].iter().any(|&p| p >= a && reach[p]);
        }
        reach[b]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waves_group_independent_kernels() {
        let s = Schedule::from_deps(vec![vec![], vec![], vec![0, 1], vec![0], vec![2, 3]]);
        assert_eq!(s.waves, vec![vec![0, 1], vec![2, 3], vec![4]]);
        assert!(s.ordered(0, 4) && s.ordered(1, 2));
        assert!(!s.ordered(1, 3) && !s.ordered(2, 3) && !s.ordered(3, 2));
    }
}
