//! A bounded slab: slots reused through a free list, each with a generation so that an id
//! kept by the transaction user after its transaction ended can never reach a newer one.

/// Index and generation of an occupied slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SlotKey {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

#[derive(Debug)]
pub(crate) struct Slab<T> {
    slots: Vec<Slot<T>>,
    /// Freed indices, reused last-in first-out: the most recently used memory is the warmest.
    free: Vec<u32>,
    len: usize,
    limit: usize,
}

impl<T> Slab<T> {
    pub(crate) fn new(limit: usize) -> Self {
        // Never more slots than a u32 index can name.
        let limit = limit.min(u32::MAX as usize);
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
            limit,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len >= self.limit
    }

    /// Stores `value`, or hands it back when the slab is at its limit.
    pub(crate) fn insert(&mut self, value: T) -> Result<SlotKey, T> {
        if self.is_full() {
            return Err(value);
        }
        let index = if let Some(i) = self.free.pop() {
            i
        } else {
            self.slots.push(Slot {
                generation: 0,
                value: None,
            });
            (self.slots.len() - 1) as u32
        };
        let slot = &mut self.slots[index as usize];
        slot.value = Some(value);
        self.len += 1;
        Ok(SlotKey {
            index,
            generation: slot.generation,
        })
    }

    pub(crate) fn get_mut(&mut self, key: SlotKey) -> Option<&mut T> {
        self.slots
            .get_mut(key.index as usize)
            .filter(|s| s.generation == key.generation)
            .and_then(|s| s.value.as_mut())
    }

    pub(crate) fn get(&self, key: SlotKey) -> Option<&T> {
        self.slots
            .get(key.index as usize)
            .filter(|s| s.generation == key.generation)
            .and_then(|s| s.value.as_ref())
    }

    pub(crate) fn at(&self, index: u32) -> Option<&T> {
        self.slots
            .get(index as usize)
            .and_then(|s| s.value.as_ref())
    }

    pub(crate) fn at_mut(&mut self, index: u32) -> Option<&mut T> {
        self.slots
            .get_mut(index as usize)
            .and_then(|s| s.value.as_mut())
    }

    /// The key of an occupied slot.
    pub(crate) fn key_at(&self, index: u32) -> SlotKey {
        SlotKey {
            index,
            generation: self.slots.get(index as usize).map_or(0, |s| s.generation),
        }
    }

    pub(crate) fn remove_at(&mut self, index: u32) -> Option<T> {
        let slot = self.slots.get_mut(index as usize)?;
        let value = slot.value.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.len -= 1;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_refuses_and_stale_keys_miss() {
        let mut s = Slab::new(2);
        let a = s.insert('a').unwrap();
        let _b = s.insert('b').unwrap();
        assert_eq!(s.insert('c'), Err('c'));
        assert_eq!(s.remove_at(a.index), Some('a'));
        let c = s.insert('c').unwrap();
        assert_eq!(c.index, a.index);
        assert_eq!(s.get(a), None);
        assert_eq!(s.get(c), Some(&'c'));
        assert_eq!(s.len(), 2);
    }
}
