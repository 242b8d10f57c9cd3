//! The container and pod of a process, from `/proc/PID/cgroup`.
//!
//! cgroup v2 has one line `0::<path>`; v1 one line per hierarchy `N:<controllers>:<path>`, of
//! which the `name=systemd` line (else the first non-empty path) is used. The path names the
//! container and the pod in the forms the container runtimes and the kubelet write:
//! - systemd driver: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with
//!   _>.slice/cri-containerd-<64 hex>.scope` (Guaranteed pods: `kubepods-pod<uid>.slice`); the
//!   scope prefix names the runtime (`cri-containerd`, `crio`, `docker`, `libpod`);
//! - cgroupfs driver: `/kubepods/burstable/pod<uid>/<64 hex>`;
//! - plain Docker: `/system.slice/docker-<64 hex>.scope` or `/docker/<64 hex>`.
//!
//! The observer must run in the host's cgroup namespace for these paths to be whole (in a
//! container's own namespace the path reads `/`).

use serde::{Deserialize, Serialize};

/// What a cgroup path says about the workload.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    /// The cgroup v2 path (or v1 path of the systemd hierarchy).
    pub cgroup: String,
    /// 64-hex container id.
    pub container_id: Option<String>,
    /// `containerd`, `crio`, `docker`, `podman` when the path says.
    pub runtime: Option<String>,
    /// Kubernetes pod UID (dashes).
    pub pod_uid: Option<String>,
}

impl Workload {
    /// `pod <uid>/<12 hex>` or `<runtime> <12 hex>`: the short form views print.
    pub fn short(&self) -> Option<String> {
        let c = self.container_id.as_deref().map(|c| &c[..12.min(c.len())]);
        match (&self.pod_uid, c) {
            (Some(p), Some(c)) => Some(format!("pod {p}/{c}")),
            (Some(p), None) => Some(format!("pod {p}")),
            (None, Some(c)) => Some(format!(
                "{} {c}",
                self.runtime.as_deref().unwrap_or("container")
            )),
            (None, None) => None,
        }
    }
}

/// Parses the text of `/proc/PID/cgroup`. `None` when no line carries a path.
pub fn parse(text: &str) -> Option<Workload> {
    let mut v2 = None;
    let mut systemd = None;
    let mut first = None;
    for line in text.lines() {
        let mut it = line.splitn(3, ':');
        let (Some(id), Some(ctrl), Some(path)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if path.is_empty() {
            continue;
        }
        if id == "0" && ctrl.is_empty() {
            v2 = Some(path);
        } else if ctrl == "name=systemd" {
            systemd = Some(path);
        } else if first.is_none() {
            first = Some(path);
        }
    }
    // A hybrid host's unified line reads `/` while the v1 hierarchies hold the path.
    let path = v2.filter(|p| *p != "/").or(systemd).or(first).or(v2)?;
    Some(of_path(path))
}

/// What one cgroup path says.
pub fn of_path(path: &str) -> Workload {
    let mut w = Workload {
        cgroup: path.to_string(),
        ..Workload::default()
    };
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        if let Some(uid) = pod_uid(comp) {
            w.pod_uid = Some(uid);
        }
        if let Some((rt, id)) = container(comp) {
            w.container_id = Some(id);
            w.runtime = rt;
        }
    }
    w
}

/// `pod<uid>` in a slice or directory name (`_` or `-` separated).
fn pod_uid(comp: &str) -> Option<String> {
    let at = comp.rfind("pod")?;
    let rest = comp[at + 3..].trim_end_matches(".slice");
    let uid: String = rest
        .chars()
        .map(|c| if c == '_' { '-' } else { c })
        .collect();
    let groups: Vec<&str> = uid.split('-').collect();
    let lens = [8, 4, 4, 4, 12];
    (groups.len() == 5
        && groups
            .iter()
            .zip(lens)
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit())))
    .then_some(uid)
}

/// `<runtime>-<64 hex>.scope`, `<64 hex>`: the runtime (if named) and the id.
fn container(comp: &str) -> Option<(Option<String>, String)> {
    let c = comp.strip_suffix(".scope").unwrap_or(comp);
    let (prefix, id) = match c.rfind('-') {
        Some(i) => (Some(&c[..i]), &c[i + 1..]),
        None => (None, c),
    };
    if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let runtime = prefix.and_then(|p| match p {
        "cri-containerd" => Some("containerd"),
        "crio" => Some("crio"),
        "docker" => Some("docker"),
        "libpod" => Some("podman"),
        _ => None,
    });
    // crio's monitor (`crio-conmon-<id>.scope`) is not the container.
    if prefix == Some("crio-conmon") {
        return None;
    }
    Some((runtime.map(str::to_string), id.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a9c1b7e4d5a6b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d";

    #[test]
    fn kubelet_systemd_driver_containerd() {
        let t = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_0f1a_4b2c_9d3e_4f5a6b7c8d9e.slice/cri-containerd-{ID}.scope\n"
        );
        let w = parse(&t).unwrap();
        assert_eq!(
            w.pod_uid.as_deref(),
            Some("1b2c3d4e-0f1a-4b2c-9d3e-4f5a6b7c8d9e")
        );
        assert_eq!(w.container_id.as_deref(), Some(ID));
        assert_eq!(w.runtime.as_deref(), Some("containerd"));
        assert_eq!(
            w.short().unwrap(),
            "pod 1b2c3d4e-0f1a-4b2c-9d3e-4f5a6b7c8d9e/3f2a9c1b7e4d"
        );
    }

    #[test]
    fn guaranteed_pod_cgroupfs_driver_and_crio() {
        let w = of_path(&format!(
            "/kubepods/pod1b2c3d4e-0f1a-4b2c-9d3e-4f5a6b7c8d9e/{ID}"
        ));
        assert_eq!(
            w.pod_uid.as_deref(),
            Some("1b2c3d4e-0f1a-4b2c-9d3e-4f5a6b7c8d9e")
        );
        assert_eq!(w.container_id.as_deref(), Some(ID));
        assert_eq!(w.runtime, None);
        let w = of_path(&format!(
            "/kubepods.slice/kubepods-pod1b2c3d4e_0f1a_4b2c_9d3e_4f5a6b7c8d9e.slice/crio-{ID}.scope"
        ));
        assert_eq!(w.runtime.as_deref(), Some("crio"));
        let w = of_path(&format!("/kubepods.slice/crio-conmon-{ID}.scope"));
        assert_eq!(w.container_id, None, "the monitor is not the container");
    }

    #[test]
    fn docker_podman_and_plain_hosts() {
        let w = of_path(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!(
            (w.runtime.as_deref(), w.pod_uid.as_deref()),
            (Some("docker"), None)
        );
        assert_eq!(w.short().unwrap(), "docker 3f2a9c1b7e4d");
        let w = of_path(&format!("/docker/{ID}"));
        assert_eq!(w.container_id.as_deref(), Some(ID));
        let w = of_path(&format!("/user.slice/user-1000.slice/libpod-{ID}.scope"));
        assert_eq!(w.runtime.as_deref(), Some("podman"));
        let w = parse("0::/user.slice/user-1000.slice/session-3.scope\n").unwrap();
        assert_eq!((w.container_id, w.pod_uid), (None, None));
        assert_eq!(w.cgroup, "/user.slice/user-1000.slice/session-3.scope");
        // Not a pod: a slice that merely contains "pod".
        assert_eq!(of_path("/podman.slice/x").pod_uid, None);
    }

    #[test]
    fn cgroup_v1_uses_the_systemd_hierarchy() {
        let t = format!(
            "12:memory:/docker/{ID}\n1:name=systemd:/kubepods/besteffort/pod1b2c3d4e-0f1a-4b2c-9d3e-4f5a6b7c8d9e/{ID}\n0::/\n"
        );
        // A hybrid host: the unified line is `/`, the systemd hierarchy's is the one.
        let w = parse(&t).unwrap();
        assert_eq!(
            w.pod_uid.as_deref(),
            Some("1b2c3d4e-0f1a-4b2c-9d3e-4f5a6b7c8d9e")
        );
        assert_eq!(parse(""), None);
        assert_eq!(parse("garbage\n"), None);
    }
}
