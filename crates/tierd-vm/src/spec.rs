//! Guest topologies and the QEMU command line that describes them.
//!
//! The slow tier is *advertised*, not emulated: QEMU builds an ACPI SRAT (which memory
//! belongs to which node), SLIT (`-numa dist`) and HMAT (`hmat=on`, `-numa hmat-lb`:
//! latency and bandwidth from each initiator to each target). Since 6.10 the kernel turns
//! HMAT performance into an abstract distance per node (drivers/acpi/numa/hmat.c
//! `hmat_calculate_adistance()`, mm/memory-tiers.c `mt_perf_to_adistance()`) and a
//! CPU-less node with 3x the latency and 1/4 the bandwidth lands in a lower tier than
//! DRAM (docs/lab.md, first guest runs, 1: `memory_tier4: nodelist=0`, `memory_tier54: nodelist=1`). Without
//! HMAT both nodes share one tier and nothing is demoted or promoted.
//!
//! QEMU syntax: docs/system/... `-numa` in qemu-options.hx (QEMU 7.2).

use std::fmt::Write as _;
use std::path::Path;

use crate::Error;

/// One guest NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// vCPUs on this node (0 = memory-only, the "CXL" case).
    pub cpus: u32,
    /// Memory in MiB.
    pub mem_mib: u64,
}

/// Access performance from one initiator node to one memory node (HMAT SLLBI entries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HmatLink {
    /// Initiator node (must have CPUs).
    pub initiator: u32,
    /// Target (memory) node.
    pub target: u32,
    /// Access latency in nanoseconds.
    pub latency_ns: u32,
    /// Access bandwidth in MiB/s (QEMU's `bandwidth=<n>M`).
    pub bandwidth_mib_s: u32,
}

/// A guest machine: nodes, SLIT distances and HMAT links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestSpec {
    /// Nodes, numbered by their index.
    pub nodes: Vec<NodeSpec>,
    /// SLIT distances `(a, b, d)` for `a != b`, applied in both directions.
    pub distances: Vec<(u32, u32, u32)>,
    /// HMAT latency/bandwidth for initiator/target pairs. Empty = no HMAT (the control
    /// case in which every node is DRAM to the kernel).
    pub hmat: Vec<HmatLink>,
}

/// How the guest's CPUs are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualization (`-accel kvm -cpu host`).
    Kvm,
    /// QEMU's binary translator (`-accel tcg,thread=multi -cpu max`).
    Tcg,
}

impl std::fmt::Display for Accel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Kvm => "kvm",
            Self::Tcg => "tcg",
        })
    }
}

const FAST_LAT: u32 = 100;
const FAST_BW: u32 = 20 * 1024;
const SLOW_LAT: u32 = 300;
const SLOW_BW: u32 = 5 * 1024;

impl GuestSpec {
    /// The lab's machine (docs/lab.md): node 0 = 2 vCPUs + 2 GiB, node 1 = 2 GiB without CPUs; HMAT
    /// from node 0: 100 ns / 20 GiB/s to node 0, 300 ns / 5 GiB/s to node 1; SLIT 20.
    #[must_use]
    pub fn two_node() -> Self {
        Self::two_node_sized(2048, 2048)
    }

    /// [`Self::two_node`] with other memory sizes (MiB).
    #[must_use]
    pub fn two_node_sized(fast_mib: u64, slow_mib: u64) -> Self {
        Self {
            nodes: vec![
                NodeSpec {
                    cpus: 2,
                    mem_mib: fast_mib,
                },
                NodeSpec {
                    cpus: 0,
                    mem_mib: slow_mib,
                },
            ],
            distances: vec![(0, 1, 20)],
            hmat: vec![
                HmatLink {
                    initiator: 0,
                    target: 0,
                    latency_ns: FAST_LAT,
                    bandwidth_mib_s: FAST_BW,
                },
                HmatLink {
                    initiator: 0,
                    target: 1,
                    latency_ns: SLOW_LAT,
                    bandwidth_mib_s: SLOW_BW,
                },
            ],
        }
    }

    /// Three nodes: two DRAM sockets (node 0 and node 1, 1 vCPU and 1.5 GiB each) and a
    /// CPU-less slow node 2 (2 GiB). SLIT: 0-1 = 21 (a typical two-socket value), each
    /// socket to node 2 = 24 (farther than the other socket). HMAT: local DRAM 100 ns /
    /// 20 GiB/s, the other socket's DRAM 150 ns / 10 GiB/s, node 2 from either socket
    /// 300 ns / 5 GiB/s, so nodes 0 and 1 share the DRAM tier (a node's tier comes from
    /// its best initiator) and node 2 is below it.
    #[must_use]
    pub fn three_node() -> Self {
        Self::three_node_sized(1536, 2048)
    }

    /// [`Self::three_node`] with `dram_mib` on each of nodes 0 and 1 and `slow_mib` on node 2.
    #[must_use]
    pub fn three_node_sized(dram_mib: u64, slow_mib: u64) -> Self {
        let link = |initiator, target, latency_ns, bandwidth_mib_s| HmatLink {
            initiator,
            target,
            latency_ns,
            bandwidth_mib_s,
        };
        Self {
            nodes: vec![
                NodeSpec {
                    cpus: 1,
                    mem_mib: dram_mib,
                },
                NodeSpec {
                    cpus: 1,
                    mem_mib: dram_mib,
                },
                NodeSpec {
                    cpus: 0,
                    mem_mib: slow_mib,
                },
            ],
            distances: vec![(0, 1, 21), (0, 2, 24), (1, 2, 24)],
            hmat: vec![
                link(0, 0, FAST_LAT, FAST_BW),
                link(0, 1, 150, 10 * 1024),
                link(0, 2, SLOW_LAT, SLOW_BW),
                link(1, 0, 150, 10 * 1024),
                link(1, 1, FAST_LAT, FAST_BW),
                link(1, 2, SLOW_LAT, SLOW_BW),
            ],
        }
    }

    /// Total vCPUs.
    #[must_use]
    pub fn cpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.cpus).sum()
    }

    /// Total memory in MiB.
    #[must_use]
    pub fn mem_mib(&self) -> u64 {
        self.nodes.iter().map(|n| n.mem_mib).sum()
    }

    /// Checks what QEMU would otherwise reject with a less clear message.
    ///
    /// # Errors
    /// [`Error::Spec`] naming the problem.
    pub fn validate(&self) -> Result<(), Error> {
        let n =
            u32::try_from(self.nodes.len()).map_err(|_| Error::Spec("too many nodes".into()))?;
        if n == 0 || self.cpus() == 0 {
            return Err(Error::Spec("need at least one node with CPUs".into()));
        }
        if let Some((i, _)) = self.nodes.iter().enumerate().find(|(_, x)| x.mem_mib == 0) {
            return Err(Error::Spec(format!("node {i} has no memory")));
        }
        for &(a, b, d) in &self.distances {
            if a >= n || b >= n || a == b || d <= 10 {
                return Err(Error::Spec(format!("bad distance {a}->{b} = {d}")));
            }
        }
        for l in &self.hmat {
            if l.initiator >= n || l.target >= n {
                return Err(Error::Spec(format!(
                    "HMAT link {}->{} names a missing node",
                    l.initiator, l.target
                )));
            }
            if self.nodes[l.initiator as usize].cpus == 0 {
                return Err(Error::Spec(format!(
                    "HMAT initiator {} has no CPUs",
                    l.initiator
                )));
            }
        }
        Ok(())
    }

    /// The initiator recorded in SRAT for a node: itself when it has CPUs, otherwise the
    /// CPU node with the lowest HMAT latency to it (QEMU requires `initiator=` on every
    /// node once `hmat=on`).
    fn initiator_of(&self, node: u32) -> u32 {
        if self.nodes[node as usize].cpus > 0 {
            return node;
        }
        self.hmat
            .iter()
            .filter(|l| l.target == node)
            .min_by_key(|l| (l.latency_ns, l.initiator))
            .map_or_else(
                || {
                    u32::try_from(self.nodes.iter().position(|x| x.cpus > 0).unwrap_or(0))
                        .unwrap_or(0)
                },
                |l| l.initiator,
            )
    }

    /// The machine part of the QEMU command line (everything but accelerator, kernel,
    /// initrd and console).
    ///
    /// # Errors
    /// [`Error::Spec`] from [`Self::validate`].
    pub fn machine_args(&self) -> Result<Vec<String>, Error> {
        self.validate()?;
        let hmat = !self.hmat.is_empty();
        let mut a: Vec<String> = vec![
            "-smp".into(),
            self.cpus().to_string(),
            "-m".into(),
            format!("{}M", self.mem_mib()),
            "-machine".into(),
            if hmat {
                "q35,hmat=on".into()
            } else {
                "q35".into()
            },
        ];
        let mut next_cpu = 0;
        for (i, node) in self.nodes.iter().enumerate() {
            let id = u32::try_from(i).map_err(|_| Error::Spec("too many nodes".into()))?;
            a.push("-object".into());
            a.push(format!("memory-backend-ram,id=m{i},size={}M", node.mem_mib));
            let mut spec = format!("node,nodeid={i}");
            if node.cpus > 0 {
                let _ = write!(spec, ",cpus={}-{}", next_cpu, next_cpu + node.cpus - 1);
                next_cpu += node.cpus;
            }
            let _ = write!(spec, ",memdev=m{i}");
            if hmat {
                let _ = write!(spec, ",initiator={}", self.initiator_of(id));
            }
            a.push("-numa".into());
            a.push(spec);
        }
        for &(x, y, d) in &self.distances {
            a.push("-numa".into());
            a.push(format!("dist,src={x},dst={y},val={d}"));
            a.push("-numa".into());
            a.push(format!("dist,src={y},dst={x},val={d}"));
        }
        for l in &self.hmat {
            a.push("-numa".into());
            a.push(format!(
                "hmat-lb,initiator={},target={},hierarchy=memory,data-type=access-latency,latency={}",
                l.initiator, l.target, l.latency_ns
            ));
            a.push("-numa".into());
            a.push(format!(
                "hmat-lb,initiator={},target={},hierarchy=memory,data-type=access-bandwidth,bandwidth={}M",
                l.initiator, l.target, l.bandwidth_mib_s
            ));
        }
        Ok(a)
    }

    /// The whole QEMU command line (without the program name). The console is the first
    /// serial port on qemu's stdout; there is no display, monitor or default device, and
    /// `-no-reboot` (with `panic=-1` in `append`) makes a panic end qemu.
    ///
    /// # Errors
    /// [`Error::Spec`].
    pub fn qemu_args(
        &self,
        accel: Accel,
        kernel: &Path,
        initrd: &Path,
        append: &str,
    ) -> Result<Vec<String>, Error> {
        let mut a: Vec<String> = match accel {
            Accel::Tcg => vec![
                "-accel".into(),
                "tcg,thread=multi".into(),
                "-cpu".into(),
                "max".into(),
            ],
            Accel::Kvm => vec!["-accel".into(), "kvm".into(), "-cpu".into(), "host".into()],
        };
        a.extend(self.machine_args()?);
        a.extend([
            "-kernel".into(),
            kernel.display().to_string(),
            "-initrd".into(),
            initrd.display().to_string(),
            "-append".into(),
            append.to_owned(),
            "-nodefaults".into(),
            "-no-user-config".into(),
            "-display".into(),
            "none".into(),
            "-serial".into(),
            "stdio".into(),
            "-monitor".into(),
            "none".into(),
            "-no-reboot".into(),
        ]);
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(args: &[String], s: &str) -> bool {
        args.iter().any(|a| a == s)
    }

    #[test]
    fn two_node_args_carry_numa_and_hmat() {
        let a = GuestSpec::two_node()
            .qemu_args(
                Accel::Tcg,
                Path::new("/k/vmlinux"),
                Path::new("/k/i.gz"),
                "console=ttyS0",
            )
            .expect("args");
        assert!(has(&a, "q35,hmat=on"));
        assert!(has(&a, "tcg,thread=multi"));
        assert!(has(&a, "4096M"));
        assert!(has(&a, "node,nodeid=0,cpus=0-1,memdev=m0,initiator=0"));
        assert!(has(&a, "node,nodeid=1,memdev=m1,initiator=0"), "{a:?}");
        assert!(has(&a, "memory-backend-ram,id=m1,size=2048M"));
        assert!(has(&a, "dist,src=0,dst=1,val=20"));
        assert!(has(
            &a,
            "hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-latency,latency=300"
        ));
        assert!(has(&a, "hmat-lb,initiator=0,target=1,hierarchy=memory,data-type=access-bandwidth,bandwidth=5120M"));
        assert!(has(
            &a,
            "hmat-lb,initiator=0,target=0,hierarchy=memory,data-type=access-latency,latency=100"
        ));
        assert_eq!(a.iter().filter(|x| x.starts_with("hmat-lb")).count(), 4);
        // every -numa/-object/-append flag is followed by its value
        let i = a.iter().position(|x| x == "-append").expect("append");
        assert_eq!(a[i + 1], "console=ttyS0");
    }

    #[test]
    fn three_node_args_make_node2_the_slow_cpuless_one() {
        let s = GuestSpec::three_node();
        let a = s.machine_args().expect("args");
        assert!(has(&a, "-smp") && has(&a, "2"));
        assert!(
            has(&a, "node,nodeid=0,cpus=0-0,memdev=m0,initiator=0"),
            "{a:?}"
        );
        assert!(has(&a, "node,nodeid=1,cpus=1-1,memdev=m1,initiator=1"));
        assert!(has(&a, "node,nodeid=2,memdev=m2,initiator=0"));
        assert_eq!(a.iter().filter(|x| x.starts_with("hmat-lb")).count(), 12);
        assert!(has(
            &a,
            "hmat-lb,initiator=1,target=2,hierarchy=memory,data-type=access-latency,latency=300"
        ));
        assert!(has(&a, "dist,src=2,dst=1,val=24"));
        // node 2 is slower than either DRAM node from every initiator
        for init in [0, 1] {
            let lat = |t| {
                s.hmat
                    .iter()
                    .find(|l| l.initiator == init && l.target == t)
                    .map(|l| l.latency_ns)
            };
            assert!(lat(2) > lat(0) && lat(2) > lat(1));
        }
    }

    #[test]
    fn no_hmat_is_the_control_machine() {
        let mut s = GuestSpec::two_node();
        s.hmat.clear();
        let a = s.machine_args().expect("args");
        assert!(has(&a, "q35"));
        assert!(!a
            .iter()
            .any(|x| x.contains("hmat") || x.contains("initiator")));
    }

    #[test]
    fn invalid_specs_are_rejected() {
        let mut s = GuestSpec::two_node();
        s.hmat.push(HmatLink {
            initiator: 1,
            target: 0,
            latency_ns: 1,
            bandwidth_mib_s: 1,
        });
        assert!(
            matches!(s.validate(), Err(Error::Spec(_))),
            "CPU-less initiator"
        );
        let mut s = GuestSpec::two_node();
        s.distances.push((0, 5, 20));
        assert!(matches!(s.machine_args(), Err(Error::Spec(_))));
        let s = GuestSpec {
            nodes: vec![NodeSpec {
                cpus: 0,
                mem_mib: 1,
            }],
            distances: vec![],
            hmat: vec![],
        };
        assert!(matches!(s.validate(), Err(Error::Spec(_))));
    }
}
