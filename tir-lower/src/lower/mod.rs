//! Lowering: a verified [`FusedGraph`] in, a verified and certified [`Program`] out.
//!
//! Every value that lives in memory gets a buffer: sources keep theirs (inputs, parameters,
//! states, constants), a state update writes its state in place, a kernel root named as an
//! output gets an output buffer, and every other root a region of the arena. Each fused kernel
//! becomes one [`TileKernel`] ([`kernels`]), or two for a matmul or attention with too few
//! programs to fill the target: its K or key loop split over programs that write partial
//! results to arena buffers, then a kernel that adds them and applies the epilogue once. Members are computed at index tiles ([`emit`]),
//! so layout ops are index maps of loads and stores, never copies. An output that is a source
//! gets a copy kernel. Kernels are then ordered by their data flow plus, for each state, "every
//! read of its value at the start of the run before its update"; the schedule, the memory plan
//! and a legality certificate per kernel ([`crate::legality`]) complete the program, which
//! [`crate::program::verify_program`] and [`crate::legality::check_program`] check.

pub mod attention;
pub mod builder;
pub mod collective;
pub mod conv;
pub mod custom;
pub mod emit;
pub mod kernels;

use crate::legality::{self, LaunchCheck, LegalityError};
use crate::plan::MemoryPlan;
use crate::program::{Buffer, Program, Signature, Storage};
use crate::schedule::Schedule;
use crate::target::{Target, TileShapes};
use crate::tile::{DimPolynomial, TileKernel};
use builder::KernelBuilder;
use emit::KernelLowering;
use std::collections::{BTreeSet, HashMap};
use tir_graph::{DType, Dim, Graph, NodeId, Op, Shape, TensorType};
use tir_opt::fusion::kinds::is_library_matmul;
use tir_opt::{FusedGraph, KernelKind};

/// Why a graph could not be lowered.
#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    /// The optimizer refused the graph.
    #[error(transparent)]
    Optimize(#[from] tir_opt::OptError),
    /// The graph cannot be sharded as asked.
    #[error(transparent)]
    Shard(#[from] tir_opt::shard::ShardError),
    /// A kernel needs something lowering does not do.
    #[error("kernel {kernel}: {reason}")]
    Unsupported {
        /// The kernel's name.
        kernel: String,
        /// What it needs.
        reason: String,
    },
    /// The kernels cannot be ordered: a state would be read both at its value from the start of the
    /// run and after its update.
    #[error("state `{state}` is read both at its value from the start of the run (by {before}) and after its update (by {after}) in one kernel chain; compute the read from the new value or split the graph")]
    StateReadAfterUpdate {
        /// The state's name.
        state: String,
        /// The kernel that reads the value from the start of the run.
        before: String,
        /// The kernel that writes the state, whose output that reader also needs.
        after: String,
    },
    /// A kernel or the program could not be proven legal.
    #[error(transparent)]
    Illegal(#[from] LegalityError),
    /// Lowering produced tile IR that fails the verifier (a compiler bug).
    #[error("lowering produced an invalid kernel: {0}")]
    Invalid(#[from] crate::tile::verify::TileError),
}

/// Which nodes of the fused graph a program kernel computes: what tools that draw a program
/// show of it (`tirc explain --dot`). Not part of the [`Program`], which needs no graph. The
/// two kernels of a split loop share the origin of their fused kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelOrigin {
    /// What kind of kernel it is.
    pub kind: KernelKind,
    /// The node whose value the kernel writes (for a copy, the value copied).
    pub root: NodeId,
    /// The nodes it computes, in id order; empty for a copy.
    pub members: Vec<NodeId>,
}

/// One fused kernel to emit: which nodes, which buffer it writes, what it reads.
struct Job {
    name: String,
    kind: KernelKind,
    root: NodeId,
    members: BTreeSet<NodeId>,
    inputs: Vec<NodeId>,
    out: usize,
    /// The other nodes it writes, with their buffers: a custom kernel's outputs but the root's.
    siblings: Vec<(NodeId, usize)>,
    /// A kernel too small to fill the target: its loop runs as two kernels.
    split: Option<Split>,
}

/// A loop split over `splits` programs, whose partial results go through arena buffers.
#[derive(Clone, Copy)]
enum Split {
    /// A matmul's K loop: partial sums `[splits, ..matmul dims]`.
    K { partials: usize, splits: u64 },
    /// An attention's key loop (flash decoding).
    Keys { partials: [usize; 3], splits: u64 },
}

/// Lowers every kernel of `fused` for `target`; with the program, each of its kernels' origin.
pub fn lower(
    fused: &FusedGraph,
    target: &Target,
) -> Result<(Program, Vec<KernelOrigin>), LowerError> {
    let g = &fused.graph;
    let (mut buffers, buffer_of, mut jobs, outputs) = assign_buffers(fused);
    split_loops(g, &mut buffers, &mut jobs, target);
    jobs = order(g, jobs, &buffers)?;
    let mut kernels = Vec::with_capacity(jobs.len());
    let mut checks = Vec::with_capacity(jobs.len());
    let mut kernels_of_job = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let first = kernels.len();
        for (kernel, check) in lower_job(g, job, &buffers, &buffer_of, target)? {
            crate::tile::verify::verify_kernel(&kernel)?;
            kernels.push(kernel);
            checks.push(check);
        }
        kernels_of_job.push(first..kernels.len());
    }
    let schedule = schedule(g, &jobs, &buffers, &kernels_of_job);
    let uses: Vec<Vec<usize>> = kernels
        .iter()
        .map(|k| k.params.iter().map(|p| p.buffer).collect())
        .collect();
    let plan = MemoryPlan::new(&buffers, &schedule.wave_of(), &uses);
    let contracts: Vec<Option<&str>> = jobs
        .iter()
        .zip(&kernels_of_job)
        .flat_map(|(job, ks)| ks.clone().map(move |_| unsafe_contract(g, job)))
        .collect();
    let mut certificates = Vec::with_capacity(kernels.len());
    for ((kernel, check), contract) in kernels.iter().zip(checks).zip(contracts) {
        // An unsafe user's kernel is not proven: its certificate says so, with its contract.
        let mut certificate = match contract {
            Some(contract) => legality::unproven(kernel, &buffers, contract),
            None => legality::certify(kernel, &buffers)?,
        };
        certificate.checks.extend(check);
        certificates.push(certificate);
    }
    let program = Program {
        signature: signature(g, outputs),
        buffers,
        kernels,
        certificates,
        plan,
        schedule,
    };
    crate::program::verify_program(&program)?;
    legality::check_program(&program)?;
    let origins = jobs
        .into_iter()
        .zip(kernels_of_job)
        .flat_map(|(job, kernels)| {
            let origin = KernelOrigin {
                kind: job.kind,
                root: job.root,
                members: job.members.into_iter().collect(),
            };
            kernels.map(move |_| origin.clone())
        })
        .collect();
    Ok((program, origins))
}

type Assigned = (
    Vec<Buffer>,
    HashMap<NodeId, usize>,
    Vec<Job>,
    Vec<(String, usize)>,
);

/// Buffers for every source and kernel root, the jobs (kernels, plus copies for outputs that
/// are sources), and each output's buffer.
fn assign_buffers(fused: &FusedGraph) -> Assigned {
    let g = &fused.graph;
    let mut buffers: Vec<Buffer> = Vec::new();
    let mut buffer_of: HashMap<NodeId, usize> = HashMap::new();
    let add = |buffers: &mut Vec<Buffer>, name: String, node: NodeId, storage: Storage| {
        buffers.push(Buffer {
            name,
            ty: g.ty(node).clone(),
            storage,
        });
        buffers.len() - 1
    };
    for id in g.node_ids() {
        let storage = match &g.node(id).op {
            Op::Input { name } => Storage::Input(name.clone()),
            Op::Parameter { name } => Storage::Parameter(name.clone()),
            Op::State { name } => Storage::State(name.clone()),
            Op::Constant { data } => Storage::Constant(data.clone()),
            _ => continue,
        };
        let name = g
            .node(id)
            .op
            .source_name()
            .map_or(id.to_string(), str::to_string);
        let b = add(&mut buffers, name, id, storage);
        buffer_of.insert(id, b);
    }
    let output_name = |node: NodeId| {
        g.outputs()
            .iter()
            .find(|(_, o)| *o == node)
            .map(|(n, _)| n.clone())
    };
    let mut jobs = Vec::new();
    for (i, k) in fused.kernels.iter().enumerate() {
        let mut written = Vec::with_capacity(k.outputs().len());
        for &node in k.outputs() {
            let out = if g.node(node).op.is_state_update() {
                buffer_of[&g.operands(node)[0]]
            } else if let Some(name) = output_name(node) {
                add(
                    &mut buffers,
                    format!("output \"{name}\""),
                    node,
                    Storage::Output,
                )
            } else {
                add(&mut buffers, node.to_string(), node, Storage::Arena)
            };
            buffer_of.insert(node, out);
            written.push((node, out));
        }
        let out = buffer_of[&k.root];
        written.retain(|(node, _)| *node != k.root);
        jobs.push(Job {
            name: format!("k{i}_{}", k.kind.name()),
            kind: k.kind,
            root: k.root,
            members: k.members.iter().copied().collect(),
            inputs: k.inputs.clone(),
            out,
            siblings: written,
            split: None,
        });
    }
    updates_out_of_place(g, &mut buffers, &mut buffer_of, &mut jobs);
    let mut outputs = Vec::new();
    let mut copies: HashMap<NodeId, usize> = HashMap::new();
    for (name, node) in g.outputs() {
        let buffer = if g.node(*node).op.is_source() {
            *copies.entry(*node).or_insert_with(|| {
                let out = add(
                    &mut buffers,
                    format!("output \"{name}\""),
                    *node,
                    Storage::Output,
                );
                jobs.push(Job {
                    name: format!("k{}_copy", jobs.len()),
                    kind: KernelKind::Layout,
                    root: *node,
                    members: BTreeSet::new(),
                    inputs: vec![*node],
                    out,
                    siblings: Vec::new(),
                    split: None,
                });
                out
            })
        } else if g.node(*node).op.is_state_update() {
            // After the run the state holds the new value.
            buffer_of[&g.operands(*node)[0]]
        } else {
            buffer_of[node]
        };
        outputs.push((name.clone(), buffer));
    }
    (buffers, buffer_of, jobs, outputs)
}

/// A state update writes its state in place, after every read of the state's old value. That
/// is impossible when the update must also come before such a read (a cycle: a reader of the
/// old value needs the new one, or two states are updated from each other, `a := b` and
/// `b := a`), and unsafe when a slice write reads its own state. Such an update computes the
/// new state into an arena buffer instead (as an elementwise kernel), and a copy into the state
/// runs after the last read: the copy is read by nothing, so it closes no cycle. Updates are
/// moved out of place one at a time, the first on a cycle each time, until no cycle is left.
fn updates_out_of_place(
    g: &Graph,
    buffers: &mut Vec<Buffer>,
    buffer_of: &mut HashMap<NodeId, usize>,
    jobs: &mut Vec<Job>,
) {
    for w in 0..jobs.len() {
        let root = jobs[w].root;
        if !matches!(g.node(root).op, Op::StateWriteSlice { .. }) || jobs[w].members.is_empty() {
            continue;
        }
        let state = g.operands(root)[0];
        let reads_state = g.operands(root)[1..].contains(&state)
            || jobs[w]
                .members
                .iter()
                .any(|&m| m != root && g.operands(m).contains(&state));
        if reads_state {
            move_out_of_place(g, w, buffers, buffer_of, jobs);
        }
    }
    while let Some(w) = in_place_update_on_a_cycle(g, jobs, buffers) {
        move_out_of_place(g, w, buffers, buffer_of, jobs);
    }
}

/// The first job that updates a state in place and must (transitively) run before itself.
fn in_place_update_on_a_cycle(g: &Graph, jobs: &[Job], buffers: &[Buffer]) -> Option<usize> {
    let preds = predecessors(g, jobs, buffers);
    (0..jobs.len()).find(|&w| {
        let in_place = !jobs[w].members.is_empty()
            && g.node(jobs[w].root).op.is_state_update()
            && written_state(g, &jobs[w], buffers).is_some();
        if !in_place {
            return false;
        }
        let mut seen = vec![false; jobs.len()];
        let mut stack: Vec<usize> = preds[w].iter().copied().collect();
        while let Some(j) = stack.pop() {
            if j == w {
                return true;
            }
            if !std::mem::replace(&mut seen[j], true) {
                stack.extend(preds[j].iter().copied());
            }
        }
        false
    })
}

/// Makes update job `w` compute its state's new value into a new arena buffer, and adds the job
/// that copies it into the state.
fn move_out_of_place(
    g: &Graph,
    w: usize,
    buffers: &mut Vec<Buffer>,
    buffer_of: &mut HashMap<NodeId, usize>,
    jobs: &mut Vec<Job>,
) {
    let root = jobs[w].root;
    let state_buffer = jobs[w].out;
    buffers.push(Buffer {
        name: format!("new {}", buffers[state_buffer].name),
        ty: g.ty(g.operands(root)[0]).clone(),
        storage: Storage::Arena,
    });
    let temp = buffers.len() - 1;
    jobs[w].out = temp;
    // A user's kernel stays one (and refuses to run out of place: `lower_custom`).
    if jobs[w].kind != KernelKind::Custom {
        jobs[w].kind = KernelKind::Elementwise;
    }
    buffer_of.insert(root, temp);
    jobs.push(Job {
        name: format!("k{}_copy", jobs.len()),
        kind: KernelKind::Layout,
        root,
        members: BTreeSet::new(),
        inputs: vec![root],
        out: state_buffer,
        siblings: Vec::new(),
        split: None,
    });
}

/// The state (source node) a job overwrites, if any.
fn written_state(g: &Graph, job: &Job, buffers: &[Buffer]) -> Option<NodeId> {
    if !matches!(buffers[job.out].storage, Storage::State(_)) {
        return None;
    }
    let root = job.root;
    Some(if g.node(root).op.is_state_update() {
        g.operands(root)[0]
    } else {
        root
    })
}

/// For each job, the jobs that must run before it: producers of its inputs, and, for a state
/// update, every other job that reads the state's value from the start of the run.
fn predecessors(g: &Graph, jobs: &[Job], buffers: &[Buffer]) -> Vec<BTreeSet<usize>> {
    let producer: HashMap<NodeId, usize> = jobs
        .iter()
        .enumerate()
        .filter(|(_, j)| !j.members.is_empty())
        .flat_map(|(i, j)| {
            std::iter::once(j.root)
                .chain(j.siblings.iter().map(|(n, _)| *n))
                .map(move |n| (n, i))
        })
        .collect();
    let mut preds: Vec<BTreeSet<usize>> = jobs
        .iter()
        .map(|j| {
            j.inputs
                .iter()
                .filter_map(|i| producer.get(i).copied())
                .collect()
        })
        .collect();
    for (w, job) in jobs.iter().enumerate() {
        if let Some(state) = written_state(g, job, buffers) {
            for (r, reader) in jobs.iter().enumerate() {
                if r != w && reader.inputs.contains(&state) {
                    preds[w].insert(r);
                }
            }
        }
    }
    preds
}

/// Orders the jobs so every predecessor comes first (stable: by root otherwise).
fn order(g: &Graph, jobs: Vec<Job>, buffers: &[Buffer]) -> Result<Vec<Job>, LowerError> {
    let preds = predecessors(g, &jobs, buffers);
    let mut placed = vec![false; jobs.len()];
    let mut order = Vec::with_capacity(jobs.len());
    while order.len() < jobs.len() {
        let next = (0..jobs.len())
            .find(|&j| !placed[j] && preds[j].iter().all(|&p| placed[p]))
            .ok_or_else(|| cycle_error(g, &jobs, &preds, &placed, buffers))?;
        placed[next] = true;
        order.push(next);
    }
    let mut slots: Vec<Option<Job>> = jobs.into_iter().map(Some).collect();
    Ok(order.into_iter().filter_map(|i| slots[i].take()).collect())
}

fn cycle_error(
    g: &Graph,
    jobs: &[Job],
    preds: &[BTreeSet<usize>],
    placed: &[bool],
    buffers: &[Buffer],
) -> LowerError {
    let writer = (0..jobs.len())
        .find(|&j| !placed[j] && written_state(g, &jobs[j], buffers).is_some())
        .unwrap_or(0);
    let reader = preds[writer]
        .iter()
        .find(|&&p| !placed[p])
        .copied()
        .unwrap_or(writer);
    let state = written_state(g, &jobs[writer], buffers)
        .and_then(|s| g.node(s).op.source_name().map(str::to_string))
        .unwrap_or_else(|| buffers[jobs[writer].out].name.clone());
    LowerError::StateReadAfterUpdate {
        state,
        before: jobs[reader].name.clone(),
        after: jobs[writer].name.clone(),
    }
}

/// The schedule of the kernels of the ordered jobs (`kernels_of_job[j]`, in order): a job's
/// first kernel waits for the last kernel of each job it waits for, and each further kernel
/// for the one before it.
fn schedule(
    g: &Graph,
    jobs: &[Job],
    buffers: &[Buffer],
    kernels_of_job: &[std::ops::Range<usize>],
) -> Schedule {
    let mut deps = Vec::new();
    for (preds, kernels) in predecessors(g, jobs, buffers)
        .into_iter()
        .zip(kernels_of_job)
    {
        for k in kernels.clone() {
            deps.push(if k == kernels.start {
                preds.iter().map(|&p| kernels_of_job[p].end - 1).collect()
            } else {
                vec![k - 1]
            });
        }
    }
    Schedule::from_deps(deps)
}

/// Splits the loop of each matmul and attention job whose programs are too few to fill the
/// target ([`kernels::MatmulTiling::splits`], [`attention::AttentionTiling::splits`]), adding
/// the arena buffers of its partial results (in the accumulator's dtype). On a target that
/// runs plain products on a library (one that keeps epilogues out of them), a kernel that a
/// library call can run ([`is_library_matmul`]) stays whole: cuBLASLt's own
/// matrix-vector path beat the split one on the H100 (0.020 against 0.029 ms at 1x4096x4096).
fn split_loops(g: &Graph, buffers: &mut Vec<Buffer>, jobs: &mut [Job], target: &Target) {
    let tiles = &target.tiles;
    let on_library = !target.fusion.fuse_matmul_epilogue;
    let mut scratch = |name: String, dtype: DType, dims: &[Dim], splits: u64| {
        let mut all = vec![Dim::Static(splits)];
        all.extend(dims.iter().cloned());
        buffers.push(Buffer {
            name,
            ty: TensorType::new(dtype, Shape::new(all).ok()?),
            storage: Storage::Arena,
        });
        Some(buffers.len() - 1)
    };
    for job in jobs.iter_mut() {
        job.split = match job.kind {
            KernelKind::MatMul => {
                let Some(&mm) = job.members.iter().find(|&&m| g.node(m).op == Op::MatMul) else {
                    continue;
                };
                if on_library && is_library_matmul(g, &job.members, job.root, mm) {
                    continue;
                }
                let Some(splits) = kernels::MatmulTiling::splits(g, mm, tiles) else {
                    continue;
                };
                let ty = g.ty(mm);
                let dtype = kernels::accumulator(ty.dtype);
                let name = format!("partial sums of {mm}");
                scratch(name, dtype, ty.shape.dims(), splits)
                    .map(|partials| Split::K { partials, splits })
            }
            KernelKind::Attention => {
                let Some(t) = attention::AttentionTiling::new(g, &job.members, job.root, tiles)
                else {
                    continue;
                };
                let Some(splits) = t.splits(g, tiles) else {
                    continue;
                };
                let output = t.pattern.output;
                let ty = g.ty(output);
                let dtype = kernels::accumulator(ty.dtype);
                let dims = ty.shape.dims();
                let mut rows = dims.to_vec();
                *rows
                    .last_mut()
                    .expect("attention outputs have rank 2 or more") = Dim::Static(1);
                let max = scratch(format!("partial maxima of {output}"), dtype, &rows, splits);
                let sum = scratch(format!("partial sums of {output}"), dtype, &rows, splits);
                let acc = scratch(format!("partial outputs of {output}"), dtype, dims, splits);
                match (max, sum, acc) {
                    (Some(max), Some(sum), Some(acc)) => Some(Split::Keys {
                        partials: [max, sum, acc],
                        splits,
                    }),
                    _ => None,
                }
            }
            _ => None,
        };
    }
}

/// The kernels of `job`: one, or two for a split loop (the partial results, then their sum
/// with the epilogue), each with the check its launch needs.
fn lower_job(
    g: &Graph,
    job: &Job,
    buffers: &[Buffer],
    buffer_of: &HashMap<NodeId, usize>,
    target: &Target,
) -> Result<Vec<(TileKernel, Option<LaunchCheck>)>, LowerError> {
    let lowering = |name: String| KernelLowering {
        b: KernelBuilder::new(name),
        g,
        members: job.members.clone(),
        buffers,
        buffer_of,
        memo: HashMap::new(),
        rows: None,
        pinned_keys: None,
    };
    let tiles = &target.tiles;
    let mut kernels = Vec::new();
    let mut l = lowering(job.name.clone());
    let index = job.name.split('_').next().unwrap_or(&job.name);
    let sum_name = format!("{index}_splitsum");
    match job.split {
        Some(Split::K { partials, splits }) => {
            l.lower_matmul_partials(partials, splits, tiles)?;
            kernels.push((l.b.finish(), None));
            l = lowering(sum_name);
            l.lower_split_sum(job.root, job.out, (partials, splits), tiles)?;
        }
        Some(Split::Keys {
            partials: [max, sum, acc],
            splits,
        }) => {
            let partials = attention::AttentionPartials { max, sum, acc };
            l.lower_attention_partials(job.root, &partials, splits, tiles)?;
            kernels.push((l.b.finish(), None));
            l = lowering(sum_name);
            l.lower_attention_combine((job.root, job.out), &partials, splits, tiles)?;
        }
        None if job.kind == KernelKind::Custom => {
            let check = custom_launch_check(g, job, buffers, buffer_of);
            return Ok(vec![(lower_custom(g, job, buffers, buffer_of)?, check)]);
        }
        None => lower_kind(&mut l, job, tiles)?,
    }
    kernels.push((l.b.finish(), launch_check(g, job, buffers, buffer_of)));
    // The products run in the first kernel (a split loop's second kernel only sums).
    kernels[0].0.flops = product_flops(g, job, tiles);
    Ok(kernels)
}

/// The flops of `job`'s products: `2·|out|·K` per matmul, `2·|out|·(weights per output)` per
/// convolution, half of both products for a causal attention (which skips the masked half).
fn product_flops(g: &Graph, job: &Job, tiles: &TileShapes) -> DimPolynomial {
    let causal = job.kind == KernelKind::Attention
        && attention::AttentionTiling::new(g, &job.members, job.root, tiles)
            .is_some_and(|t| t.causal.is_some());
    let factor = if causal { 1 } else { 2 };
    let mut terms = Vec::new();
    for &id in &job.members {
        let reduced: &[Dim] = match &g.node(id).op {
            Op::MatMul => {
                let a = g.ty(g.operands(id)[0]).shape.dims();
                &a[a.len().saturating_sub(1)..]
            }
            Op::Conv { .. } => &g.ty(g.operands(id)[1]).shape.dims()[1..],
            _ => continue,
        };
        let mut dims = g.ty(id).shape.dims().to_vec();
        dims.extend_from_slice(reduced);
        terms.push((factor, dims));
    }
    DimPolynomial { terms }
}

/// Lowers `job` as one kernel of its kind.
fn lower_kind(l: &mut KernelLowering, job: &Job, tiles: &TileShapes) -> Result<(), LowerError> {
    match job.kind {
        KernelKind::Elementwise | KernelKind::Gather | KernelKind::Layout => {
            l.lower_pointwise(job.root, job.out, tiles)?
        }
        KernelKind::RowReduction => l.lower_rows(job.root, job.out, tiles)?,
        KernelKind::Reduction => l.lower_reduction(job.root, job.out, tiles)?,
        KernelKind::MatMul => l.lower_matmul(job.root, job.out, tiles)?,
        KernelKind::Conv => l.lower_conv(job.root, job.out, tiles)?,
        KernelKind::Attention => l.lower_attention(job.root, job.out, tiles)?,
        KernelKind::StateUpdate => l.lower_state_update(job.root, job.out, tiles)?,
        KernelKind::Collective => l.lower_collective(job.root, job.out)?,
        KernelKind::Custom => {
            return Err(l.unsupported("a custom kernel is instantiated, not built".into()))
        }
    }
    Ok(())
}

/// A user's kernel ([`custom::instantiate`]) bound to `job`'s buffers: one program writing
/// every output the job's custom nodes are.
fn lower_custom(
    g: &Graph,
    job: &Job,
    buffers: &[Buffer],
    buffer_of: &HashMap<NodeId, usize>,
) -> Result<TileKernel, LowerError> {
    let unsupported = |reason: String| LowerError::Unsupported {
        kernel: job.name.clone(),
        reason,
    };
    let Op::Custom { kernel, .. } = &g.node(job.root).op else {
        return Err(unsupported(
            "a custom kernel's root is not a custom op".into(),
        ));
    };
    let mut written = Vec::with_capacity(1 + job.siblings.len());
    for &(node, buffer) in std::iter::once(&(job.root, job.out)).chain(&job.siblings) {
        let Op::Custom { output, .. } = &g.node(node).op else {
            return Err(unsupported(format!(
                "{node} of a custom kernel is not a custom op"
            )));
        };
        if buffer >= buffers.len() {
            return Err(unsupported("a custom kernel's output has no buffer".into()));
        }
        written.push((*output, buffer));
    }
    written.sort_unstable();
    let operands = g.operands(job.root);
    let types: Vec<&TensorType> = operands.iter().map(|&o| g.ty(o)).collect();
    let inputs = operands
        .iter()
        .map(|o| buffer_of.get(o).copied())
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| unsupported("an operand of a custom kernel has no buffer".into()))?;
    let k = kernel.kernel();
    if let Some(&(_, buffer)) = written
        .iter()
        .find(|(o, _)| Some(*o) == k.in_place_output())
    {
        if inputs.first() != Some(&buffer) {
            let state = inputs.first().map_or("?", |&b| buffers[b].name.as_str());
            return Err(unsupported(format!(
                "custom kernel {} updates state `{state}` in place, but a kernel reads both \
                 the state's value from the start of the run and its new value; compute the \
                 read from one of them",
                k.name()
            )));
        }
    }
    let out_names: Vec<&str> = written
        .iter()
        .map(|(o, _)| k.outputs().get(*o).map_or("", |o| o.name.as_str()))
        .collect();
    let name = format!("{}_{}_{}", job.name, k.name(), out_names.join("_"));
    custom::instantiate(k, &written, &types, &inputs, name).map_err(|e| unsupported(e.to_string()))
}

/// The contract of `job`'s kernel if it is an unsafe user's kernel.
fn unsafe_contract<'g>(g: &'g Graph, job: &Job) -> Option<&'g str> {
    match &g.node(job.root).op {
        Op::Custom { kernel, .. } if job.kind == KernelKind::Custom => {
            match kernel.kernel().safety() {
                tir_graph::Safety::Unsafe { contract } => Some(contract.as_str()),
                tir_graph::Safety::Safe => None,
            }
        }
        _ => None,
    }
}

/// A run-time write position is checked before the kernel that writes, in place or not.
fn launch_check(
    g: &Graph,
    job: &Job,
    buffers: &[Buffer],
    buffer_of: &HashMap<NodeId, usize>,
) -> Option<LaunchCheck> {
    let Op::StateWriteSlice { axis, start: None } = g.node(job.root).op else {
        return None;
    };
    let operands = g.operands(job.root);
    let state = &buffers[buffer_of[&operands[0]]];
    Some(LaunchCheck::SliceInBounds {
        offset_buffer: buffer_of[&operands[2]],
        len: g.ty(operands[1]).shape.dims()[axis].clone(),
        size: g.ty(operands[0]).shape.dims()[axis].clone(),
        what: format!("the write position of state `{}`", state.name),
    })
}

/// A user's kernel writing a slice of its state at a run-time position
/// ([`tir_graph::StateSlice`]) is checked before its launch like `state_write_slice`.
fn custom_launch_check(
    g: &Graph,
    job: &Job,
    buffers: &[Buffer],
    buffer_of: &HashMap<NodeId, usize>,
) -> Option<LaunchCheck> {
    let Op::Custom { kernel, .. } = &g.node(job.root).op else {
        return None;
    };
    let k = kernel.kernel();
    let out = &k.outputs()[k.in_place_output()?];
    let slice = out.slice.as_ref()?;
    let operands = g.operands(job.root);
    let types: Vec<&TensorType> = operands.iter().map(|&o| g.ty(o)).collect();
    let bound = k.bind(&types).ok()?;
    let state = &buffers[*buffer_of.get(operands.first()?)?];
    Some(LaunchCheck::SliceInBounds {
        offset_buffer: *buffer_of.get(operands.get(slice.start)?)?,
        len: tir_graph::custom::bind_dim(&slice.len, &bound),
        size: types[0].shape.dims().get(slice.axis)?.clone(),
        what: format!(
            "the write position of state `{}` (custom kernel {})",
            state.name,
            k.name()
        ),
    })
}

/// The run-time signature.
fn signature(g: &Graph, outputs: Vec<(String, usize)>) -> Signature {
    let typed = |list: Vec<(String, NodeId)>| -> Vec<(String, tir_graph::TensorType)> {
        list.into_iter()
            .map(|(n, id)| (n, g.ty(id).clone()))
            .collect()
    };
    let mut dims: Vec<String> = Vec::new();
    for id in g.node_ids() {
        for name in g.ty(id).shape.dims().iter().flat_map(Dim::symbols) {
            if !dims.contains(&name) {
                dims.push(name);
            }
        }
    }
    Signature {
        inputs: typed(g.inputs()),
        parameters: typed(g.parameters()),
        states: typed(g.states()),
        outputs,
        dims,
        bounds: g.dim_bounds(),
    }
}
