//! `torpor run --user USER[:GROUP]`: the ids the application runs with, as podman's `--user`
//! takes them: names are looked up in the root's own `/etc/passwd` and `/etc/group` (read
//! confined to the root, as the application would see them), numbers are taken as they are.
//! A user given by name also gets its supplementary groups and, when the caller set none, its
//! home directory as `HOME`.

use anyhow::{bail, Context, Result};
use kernel::creds::Credentials;
use kernel::fs::Root;

/// What `--user` resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The ids.
    pub creds: Credentials,
    /// The user's home directory from passwd, if found.
    pub home: Option<String>,
}

/// Reads a file of the root (confined), empty when it does not exist.
fn read_in_root(root: &Root, path: &str) -> Result<String> {
    match root.open_at(path.as_bytes(), libc::O_RDONLY, 0) {
        Ok(fd) => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut s)
                .with_context(|| format!("reading {path} in the root"))?;
            Ok(s)
        }
        Err(abi::Errno::ENOENT) => Ok(String::new()),
        Err(e) => bail!("opening {path} in the root: {e}"),
    }
}

/// Resolves `spec` (`USER`, `UID`, `USER:GROUP`, `UID:GID`) against the root.
///
/// # Errors
/// An unknown user or group name, or an id that is not a number.
pub fn resolve(root: &Root, spec: &str) -> Result<User> {
    let passwd = read_in_root(root, "/etc/passwd")?;
    let group = read_in_root(root, "/etc/group")?;
    resolve_in(&passwd, &group, spec)
}

fn resolve_in(passwd: &str, group: &str, spec: &str) -> Result<User> {
    let (u, g) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    if u.is_empty() || g.is_some_and(str::is_empty) {
        bail!("--user {spec:?}: expected USER[:GROUP] (names or numbers)");
    }
    // name:password:uid:gid:gecos:home:shell
    let entry = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() >= 7)
        .find(|f| f[0] == u || (u.parse::<u32>().is_ok() && f[2] == u));
    let (uid, primary, name, home) = match (u.parse::<u32>(), &entry) {
        (Ok(uid), e) => (
            uid,
            e.as_ref().and_then(|f| f[3].parse::<u32>().ok()),
            e.as_ref().map(|f| f[0].to_string()),
            e.as_ref().map(|f| f[5].to_string()),
        ),
        (Err(_), Some(f)) => (
            f[2].parse::<u32>()
                .with_context(|| format!("bad uid for {u} in the root's /etc/passwd"))?,
            f[3].parse::<u32>().ok(),
            Some(f[0].to_string()),
            Some(f[5].to_string()),
        ),
        (Err(_), None) => bail!("--user {spec:?}: no user {u:?} in the root's /etc/passwd"),
    };
    // name:password:gid:members
    let groups: Vec<Vec<&str>> = group
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .filter(|f| f.len() >= 4)
        .collect();
    let gid = match g {
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => groups
                .iter()
                .find(|f| f[0] == g)
                .and_then(|f| f[2].parse().ok())
                .with_context(|| {
                    format!("--user {spec:?}: no group {g:?} in the root's /etc/group")
                })?,
        },
        None => primary.unwrap_or(uid),
    };
    let supplementary = match &name {
        Some(n) => groups
            .iter()
            .filter(|f| f[3].split(',').any(|m| m == n))
            .filter_map(|f| f[2].parse().ok())
            .filter(|&x| x != gid)
            .collect(),
        None => Vec::new(),
    };
    Ok(User {
        creds: Credentials::new(uid, gid, supplementary),
        home,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\npostgres:x:105:110:PostgreSQL:/var/lib/postgresql:/bin/bash\n";
    const GROUP: &str = "root:x:0:\nssl-cert:x:109:postgres\npostgres:x:110:\n";

    #[test]
    fn names_numbers_and_groups() {
        let u = resolve_in(PASSWD, GROUP, "postgres").unwrap();
        assert_eq!((u.creds.uid, u.creds.gid), (105, 110));
        assert_eq!(u.creds.groups, vec![109]);
        assert_eq!(u.home.as_deref(), Some("/var/lib/postgresql"));
        let u = resolve_in(PASSWD, GROUP, "105:root").unwrap();
        assert_eq!((u.creds.uid, u.creds.gid), (105, 0));
        let u = resolve_in(PASSWD, GROUP, "4242").unwrap();
        assert_eq!((u.creds.uid, u.creds.gid, u.home), (4242, 4242, None));
        assert!(resolve_in(PASSWD, GROUP, "nobody").is_err());
        assert!(resolve_in(PASSWD, GROUP, "postgres:nogroup").is_err());
        assert!(resolve_in(PASSWD, GROUP, ":").is_err());
    }
}
