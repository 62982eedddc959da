//! The transaction tables' indexes: from a matching key to the slab slot of its
//! transaction. An entry is the slot and a 32-bit hash of the key, 8 bytes; the key itself
//! is kept once, in the transaction, and compared there. A map from key to slot would hold
//! a second copy of every key (up to 136 bytes with its inline branch and host): at tens of
//! thousands of lingering transactions (Timer J keeps each non-INVITE server transaction
//! 32 s) that is most of such an index's memory, and of the cache misses of every lookup,
//! insert and removal.

use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;

/// The index's hasher. Keys (branches, Call-IDs) come from the network, so the hash is
/// keyed per process against collision flooding; foldhash's quality variant is that at a
/// fraction of SipHash's cost on keys of a few dozen bytes.
pub(crate) type IndexHasher = foldhash::quality::RandomState;

#[derive(Clone, Copy, Debug)]
struct Entry {
    slot: u32,
    hash: u32,
}

/// The table's 64-bit hash from the stored 32 bits: the table takes its bucket from the
/// low bits and a 7-bit tag from the top ones, and the multiplication by an odd constant
/// carries all 32 bits into both.
fn spread(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[derive(Debug, Default)]
pub(crate) struct KeyIndex {
    table: HashTable<Entry>,
    hasher: IndexHasher,
}

impl KeyIndex {
    fn hash_of<K: Hash>(&self, key: &K) -> u32 {
        // The low half of a 64-bit hash: foldhash mixes every bit of the key into it.
        self.hasher.hash_one(key) as u32
    }

    /// The slot whose transaction `is_key` accepts, among those hashed like `key`.
    pub(crate) fn find<K: Hash>(&self, key: &K, is_key: impl Fn(u32) -> bool) -> Option<u32> {
        let hash = self.hash_of(key);
        self.table
            .find(spread(hash), |e| e.hash == hash && is_key(e.slot))
            .map(|e| e.slot)
    }

    /// Adds `slot` under `key`; the caller has checked that `key` is not indexed yet.
    pub(crate) fn insert<K: Hash>(&mut self, key: &K, slot: u32) {
        let hash = self.hash_of(key);
        self.table
            .insert_unique(spread(hash), Entry { slot, hash }, |e| spread(e.hash));
    }

    /// Removes `slot`, indexed under `key`.
    pub(crate) fn remove<K: Hash>(&mut self, key: &K, slot: u32) {
        let hash = self.hash_of(key);
        if let Ok(entry) = self.table.find_entry(spread(hash), |e| e.slot == slot) {
            entry.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_finds_its_own_slot_and_a_removal_takes_only_its_own() {
        let mut index = KeyIndex::default();
        let keys: Vec<String> = (0..5000).map(|i| format!("z9hG4bK{i}")).collect();
        for (slot, key) in keys.iter().enumerate() {
            assert_eq!(index.find(key, |s| keys[s as usize] == *key), None);
            index.insert(key, slot as u32);
        }
        for (slot, key) in keys.iter().enumerate() {
            assert_eq!(
                index.find(key, |s| keys[s as usize] == *key),
                Some(slot as u32)
            );
        }
        // Removing one leaves every other findable.
        index.remove(&keys[17], 17);
        assert_eq!(
            index.find(&keys[17], |s| keys[s as usize] == keys[17]),
            None
        );
        assert_eq!(
            index.find(&keys[18], |s| keys[s as usize] == keys[18]),
            Some(18)
        );
    }
}
