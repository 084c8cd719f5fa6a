//! The resources' keys: written once per world and lent, and the history's index of each.

use redlock_core::lock::Names;

use super::Sim;

impl Sim {
    /// The key of resource `r` (fenced locks have their own).
    pub(crate) fn resource_name(&self, r: u32, fenced: bool) -> std::borrow::Cow<'_, str> {
        match self.names.get(self.resource_id(r, fenced) as usize) {
            Some(name) if r < self.resources => std::borrow::Cow::Borrowed(name),
            _ => std::borrow::Cow::Owned(format!("{}{r}", if fenced { 'f' } else { 'r' })),
        }
    }

    /// Writes the resources' keys once, for [`resource_name`](Sim::resource_name) to lend.
    pub(crate) fn name_resources(&mut self) {
        self.names = (0..2 * self.resources)
            .map(|id| {
                let fenced = id >= self.resources;
                let r = if fenced { id - self.resources } else { id };
                format!("{}{r}", if fenced { 'f' } else { 'r' })
            })
            .collect();
        if let Some(sem) = &self.semaphore {
            self.names
                .extend((0..sem.permits()).filter_map(|i| sem.slot_key(i).map(str::to_string)));
        }
    }

    /// The history's indexes of the semaphore's slots, in order (none without one).
    pub(crate) fn slot_ids(&self) -> Vec<u32> {
        let n = self.semaphore.as_ref().map_or(0, |s| s.permits()) as u32;
        (0..n).map(|i| 2 * self.resources + i).collect()
    }

    /// The history's index of resource `r`.
    pub(crate) fn resource_id(&self, r: u32, fenced: bool) -> u32 {
        if fenced {
            self.resources + r
        } else {
            r
        }
    }

    /// The history's index of the resource named `name`.
    pub(crate) fn resource_id_of(&self, name: &str) -> u32 {
        if let Some(slot) = self.semaphore.as_ref().and_then(|s| s.slot_of(name)) {
            return 2 * self.resources + slot as u32;
        }
        let r: u32 = name[1..].parse().unwrap_or(0);
        self.resource_id(r, name.starts_with('f'))
    }

    pub(crate) fn names_of(&self, res: &[u32], fenced: bool) -> Names {
        // The written names of a few resources, the usual case, on the stack.
        let mut few = [""; 4];
        let lent = res.len() <= few.len()
            && res
                .iter()
                .zip(few.iter_mut())
                .all(|(r, f)| match self.resource_name(*r, fenced) {
                    std::borrow::Cow::Borrowed(name) => {
                        *f = name;
                        true
                    }
                    std::borrow::Cow::Owned(_) => false,
                });
        if lent {
            return redlock_core::lock::names(&few[..res.len()]).unwrap_or_default();
        }
        let names: Vec<_> = res.iter().map(|r| self.resource_name(*r, fenced)).collect();
        let refs: Vec<&str> = names.iter().map(|n| &**n).collect();
        redlock_core::lock::names(&refs).unwrap_or_default()
    }

    pub(crate) fn names(&self, res: &[u32]) -> Names {
        self.names_of(res, false)
    }

    pub(super) fn key_of(&self, id: u32) -> std::borrow::Cow<'_, str> {
        if id >= 2 * self.resources {
            let name = self.names.get(id as usize).map_or("", String::as_str);
            return std::borrow::Cow::Borrowed(name);
        }
        if id >= self.resources {
            self.resource_name(id - self.resources, true)
        } else {
            self.resource_name(id, false)
        }
    }
}
