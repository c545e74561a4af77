//! Sandbox fork (issue 31): `torpor fork TEMPLATE` starts a new instance that carries on from
//! the live template as it is, under its own ID and ports; instances and template count
//! independently from there, and the template is left hibernated (a dormant one dormant),
//! its image written once for every fork while it stays so.

use std::net::SocketAddr;
use std::path::PathBuf;

use testutil::counting::{self, GUEST_PORT};
use testutil::{free_port, Detached, Rootfs};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_torpor"))
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn start(r: &Rootfs) -> (Detached, SocketAddr) {
    counting::start(&bin(), r)
}

fn get_counter(addr: SocketAddr) -> u64 {
    counting::get(addr)
}

/// A fork of `template` published on a port of its own.
fn fork(template: &Detached) -> (Detached, SocketAddr) {
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:{GUEST_PORT}");
    let inst = template
        .fork_beside(&["-p", &publish])
        .unwrap_or_else(|o| panic!("fork: {}", o.stderr_str()));
    (inst, local(port))
}

/// The sandbox's boot id, as its programs read it.
fn boot_id(sb: &Detached) -> String {
    let out = sb.verb(
        "exec",
        &["/bin/busybox", "cat", "/proc/sys/kernel/random/boot_id"],
    );
    assert_eq!(out.code(), 0, "exec cat: {}", out.stderr_str());
    let id = out.stdout_str().trim().to_string();
    assert_eq!(id.len(), 36, "a UUID: {id:?}");
    assert_eq!(&id[14..15], "4", "version 4: {id}");
    id
}

/// The fork images in the template's state directory.
fn images(template: &Detached) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(template.dir().join("fork"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("image-"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn forked_instances_count_on_from_the_template_and_independently() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let (tpl, tpl_addr) = start(&r);
    assert_eq!(get_counter(tpl_addr), 2, "after /up");
    let tpl_boot = boot_id(&tpl);
    assert_eq!(boot_id(&tpl), tpl_boot, "a boot id stays");
    let (a, a_addr) = fork(&tpl);
    let (b, b_addr) = fork(&tpl);
    // Both carry on from the template's count, each on its own.
    assert_eq!(get_counter(a_addr), 3);
    assert_eq!(get_counter(a_addr), 4);
    assert_eq!(get_counter(b_addr), 3);
    assert_eq!(get_counter(a_addr), 5);
    // The template was left hibernated by the first fork, nothing of it ran since, and the
    // second fork used the same image.
    assert_eq!(tpl.stat("state"), "hibernated");
    assert_eq!(images(&tpl).len(), 1, "{:?}", images(&tpl));
    // Its next request wakes it where it was.
    assert_eq!(get_counter(tpl_addr), 3);
    assert_eq!(get_counter(b_addr), 4);
    // Running again, it has changed: the next fork writes a new image, from the new count.
    let (_c, c_addr) = fork(&tpl);
    assert_eq!(get_counter(c_addr), 4);
    assert_eq!(images(&tpl).len(), 1, "the old image is removed");
    // Each instance is a boot of its own (checked last: an exec wakes the template).
    let (a_boot, b_boot) = (boot_id(&a), boot_id(&b));
    assert_ne!(a_boot, tpl_boot);
    assert_ne!(b_boot, tpl_boot);
    assert_ne!(a_boot, b_boot);
    // The instances are sandboxes of their own: deleting one leaves the others serving.
    a.ok("delete", &["--force"]);
    assert_eq!(get_counter(b_addr), 5);
    assert_eq!(get_counter(c_addr), 5);
    assert_eq!(get_counter(tpl_addr), 4);
}

#[test]
fn a_fork_of_a_hibernated_template_leaves_it_hibernated() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let (tpl, tpl_addr) = start(&r);
    assert_eq!(get_counter(tpl_addr), 2);
    tpl.ok("hibernate", &[]);
    let wakes = tpl.stat_u64("wakes");
    let (inst, inst_addr) = fork(&tpl);
    assert_eq!(get_counter(inst_addr), 3);
    assert_eq!(tpl.stat("state"), "hibernated");
    let (again, again_addr) = fork(&tpl);
    assert_eq!(get_counter(again_addr), 3);
    assert_eq!(tpl.stat("state"), "hibernated");
    assert_eq!(images(&tpl).len(), 1, "one image for both forks");
    // The fork of a hibernated template did not wake it: its image was written from its
    // deflated state; the instances' requests did not wake it either.
    assert_eq!(tpl.stat_u64("wakes"), wakes);
    assert_eq!(get_counter(tpl_addr), 3);
    drop((inst, again));
}

#[test]
fn a_fork_needs_ports_of_its_own_and_a_live_template() {
    if !testutil::require_kvm() {
        return;
    }
    let r = Rootfs::new();
    let (tpl, tpl_addr) = start(&r);
    let out = tpl.verb_in_base(&["fork", &tpl.id, "-d", "--name", "nope"]);
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr_str()
            .contains("give the instance ports of its own"),
        "{}",
        out.stderr_str()
    );
    assert!(!tpl.state_base().join("nope").exists());
    let out = tpl.verb_in_base(&["fork", "no-such-sandbox", "-d"]);
    assert_ne!(out.code(), 0);
    assert!(
        out.stderr_str().contains("does not exist"),
        "{}",
        out.stderr_str()
    );
    // The refused fork did not disturb the template.
    assert_eq!(get_counter(tpl_addr), 2);
}

#[test]
fn a_fork_of_a_dormant_template_leaves_it_dormant() {
    if !testutil::require_kvm() || testutil::platform_is_trap() {
        // Dormancy is the KVM platform's (tests/dormant.rs checks the trap's refusal).
        return;
    }
    let r = Rootfs::new();
    let (tpl, tpl_addr) = start(&r);
    assert_eq!(get_counter(tpl_addr), 2);
    let tpl_boot = boot_id(&tpl);
    tpl.ok("dormant", &[]);
    let (inst, inst_addr) = fork(&tpl);
    assert_eq!(get_counter(inst_addr), 3);
    assert_eq!(
        testutil::json_field(&tpl.ok("state", &[]), "status").as_deref(),
        Some("dormant")
    );
    assert_eq!(get_counter(tpl_addr), 3);
    // Woken in place from its checkpoint, the template is the same boot; the fork is not.
    assert_eq!(boot_id(&tpl), tpl_boot);
    assert_ne!(boot_id(&inst), tpl_boot);
    // Dormant again after a wake, its checkpoint is layered over the one it woke from (only
    // what changed is written): a fork from it has the whole memory, and so has its wake.
    tpl.ok("dormant", &[]);
    let checkpoint = tpl.dir().join("dormant/checkpoint");
    assert!(
        checkpoint.join("mem-1.base-0.img").is_file(),
        "no layered memory in {}",
        checkpoint.display()
    );
    let (again, again_addr) = fork(&tpl);
    assert_eq!(get_counter(again_addr), 4);
    assert_eq!(get_counter(tpl_addr), 4);
    assert_eq!(
        get_counter(inst_addr),
        4,
        "the first fork counts on its own"
    );
    drop(again);
}
