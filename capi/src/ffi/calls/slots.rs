//! The bookkeeping of a [`Calls`](super::Calls): numbered slots of objects, and the memory
//! arena regions register.

use super::{errno, Made, ARENA_LEN};
use crate::abi::*;

/// Numbered slots of one kind.
#[derive(Debug)]
pub(super) struct Slots<T> {
    v: Vec<Option<T>>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots { v: Vec::new() }
    }
}

impl<T: Copy + PartialEq> Slots<T> {
    pub(super) fn insert(&mut self, x: T) -> usize {
        match self.v.iter().position(Option::is_none) {
            Some(i) => {
                self.v[i] = Some(x);
                i
            }
            None => {
                self.v.push(Some(x));
                self.v.len() - 1
            }
        }
    }

    pub(super) fn get(&self, i: usize) -> Option<T> {
        self.v.get(i).copied().flatten()
    }

    pub(super) fn remove(&mut self, i: usize) {
        if let Some(s) = self.v.get_mut(i) {
            *s = None;
        }
    }

    pub(super) fn find(&self, x: T) -> Option<usize> {
        self.v.iter().position(|s| *s == Some(x))
    }

    pub(super) fn live(&self) -> Vec<usize> {
        (0..self.v.len()).filter(|&i| self.v[i].is_some()).collect()
    }

    pub(super) fn values(&self) -> Vec<T> {
        self.v.iter().flatten().copied().collect()
    }
}

/// An opened context, or the rdma_cm one (`owned: false`: never freed by closing it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ctx {
    pub(super) p: *mut ibv_context,
    pub(super) owned: bool,
}

/// The memory arena: [`ARENA_LEN`] bytes, page aligned, zeroed.
#[derive(Debug)]
pub(super) struct Arena {
    pub(super) p: *mut u8,
}

impl Arena {
    fn layout() -> std::alloc::Layout {
        // 4096 is a power of two and ARENA_LEN a multiple of it.
        std::alloc::Layout::from_size_align(ARENA_LEN, 4096)
            .unwrap_or(std::alloc::Layout::new::<u8>())
    }

    pub(super) fn new() -> Arena {
        // SAFETY: a layout of non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(Self::layout()) };
        if p.is_null() {
            std::alloc::handle_alloc_error(Self::layout());
        }
        Arena { p }
    }

    /// Frees the arena; only once no region registers any of it.
    pub(super) fn free(self) {
        // SAFETY: allocated in `new` with this layout, freed once (`self` is consumed).
        unsafe { std::alloc::dealloc(self.p, Self::layout()) };
    }
}

/// `made` for an object pointer: a new slot in `slots`, or `None` for NULL.
pub(super) fn made<T>(slots: &mut Slots<*mut T>, p: *mut T) -> Made {
    let e = errno();
    Made {
        slot: (!p.is_null()).then(|| slots.insert(p)),
        errno: e,
    }
}
