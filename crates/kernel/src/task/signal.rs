//! Signal dispositions and the blocked mask. Delivery (frames on the guest stack) comes with
//! the compatibility work; until then dispositions are recorded and default actions apply.

use abi::structs::KernelSigaction;

/// Number of signals (1..=64).
pub const NSIG: usize = 64;

/// A thread group's signal dispositions and a thread's mask.
#[derive(Clone, Debug)]
pub struct SignalState {
    /// Dispositions, index = signal - 1.
    pub actions: [KernelSigaction; NSIG],
    /// Blocked signals (bit = signal - 1).
    pub mask: u64,
}

impl Default for SignalState {
    fn default() -> Self {
        SignalState { actions: [KernelSigaction::default(); NSIG], mask: 0 }
    }
}
