//! `exec`: start a program under a task memory policy, as `numactl` does, for the policies
//! numactl cannot set. Neither bookworm's numactl 2.0.16 nor trixie's 2.0.19 passes
//! `MPOL_F_NUMA_BALANCING` with `--preferred-many` (`--balancing` applies to `--membind`
//! only; strace shows a plain `set_mempolicy(MPOL_PREFERRED_MANY, ...)`), so the lab starts
//! memcached through this to get `MPOL_PREFERRED_MANY | MPOL_F_NUMA_BALANCING`.
//!
//! The task policy survives `execve(2)` (it lives in the task, which exec keeps:
//! Documentation/admin-guide/mm/numa_memory_policy.rst, "Task/Process Policy ... inherited
//! across fork() and exec*()"), so setting it here and exec'ing is exactly numactl's method.

use std::os::unix::process::CommandExt as _;
use std::process::Command;

use anyhow::{bail, Context, Result};
use tierd_engine::types::NodeMask;
use tierd_linux::sys::{self, MPOL_DEFAULT, MPOL_F_NUMA_BALANCING, MPOL_PREFERRED_MANY};
use tierd_workload::report::ChasePolicy;

/// `tierd-workload exec`.
#[derive(clap::Args, Debug)]
pub struct ExecArgs {
    /// The task policy: default, preferred-many or preferred-many-balancing (the latter
    /// with MPOL_F_NUMA_BALANCING; 6.10+).
    #[arg(long)]
    policy: ChasePolicy,
    /// Nodes of the preferred-many policies (a list: `0`, `0-1`).
    #[arg(long, value_parser = super::node_list)]
    policy_nodes: Option<NodeMask>,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, required = true, num_args = 1..)]
    cmd: Vec<String>,
}

/// The `set_mempolicy(2)` mode of a policy and its node mask.
fn mode(policy: ChasePolicy, nodes: Option<NodeMask>) -> Result<(i32, NodeMask)> {
    match (policy, nodes) {
        (ChasePolicy::Default, None) => Ok((MPOL_DEFAULT, NodeMask::EMPTY)),
        (ChasePolicy::Default, Some(_)) => bail!("--policy-nodes needs a preferred-many --policy"),
        (_, None) => bail!("--policy {policy} needs --policy-nodes"),
        (ChasePolicy::PreferredMany, Some(n)) => Ok((MPOL_PREFERRED_MANY, n)),
        (ChasePolicy::PreferredManyBalancing, Some(n)) => {
            Ok((MPOL_PREFERRED_MANY | MPOL_F_NUMA_BALANCING, n))
        }
    }
}

/// Sets the task policy and replaces this process with the program; returns only on error.
pub fn run(a: ExecArgs) -> Result<()> {
    let (m, nodes) = mode(a.policy, a.policy_nodes)?;
    sys::set_mempolicy(m, nodes).with_context(|| {
        format!(
            "setting the task policy {} over nodes {nodes} (EINVAL: a node not online, or for \
             -balancing a kernel before 6.10)",
            a.policy
        )
    })?;
    let (prog, args) = a.cmd.split_first().context("no program to run")?;
    let err = Command::new(prog).args(args).exec();
    Err(err).with_context(|| format!("exec {prog}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_map_to_set_mempolicy_modes() {
        let n = NodeMask(1);
        assert_eq!(
            mode(ChasePolicy::PreferredManyBalancing, Some(n)).expect("mode"),
            (MPOL_PREFERRED_MANY | MPOL_F_NUMA_BALANCING, n)
        );
        assert_eq!(
            mode(ChasePolicy::PreferredMany, Some(n)).expect("mode"),
            (MPOL_PREFERRED_MANY, n)
        );
        assert_eq!(
            mode(ChasePolicy::Default, None).expect("mode"),
            (MPOL_DEFAULT, NodeMask::EMPTY)
        );
        assert!(mode(ChasePolicy::PreferredMany, None).is_err());
        assert!(mode(ChasePolicy::Default, Some(n)).is_err());
    }
}
