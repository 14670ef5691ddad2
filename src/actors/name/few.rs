//! [`Few`]: a map that keeps its first entry out of the hash table. A per-name actor most often
//! knows one waiter, one hold and one release under way at a time (an uncontended pair's): each
//! then costs no hash of its key and no table entry, coming or going. More entries go to an
//! ordinary hash map, beside it.

use std::hash::Hash;

use rustc_hash::FxHashMap;

/// A map whose first entry is kept aside. A key is in one place or the other, never both.
#[derive(Debug)]
pub(crate) struct Few<K, V> {
    one: Option<(K, V)>,
    rest: FxHashMap<K, V>,
}

impl<K, V> Default for Few<K, V> {
    fn default() -> Self {
        Self {
            one: None,
            rest: FxHashMap::default(),
        }
    }
}

impl<K: Eq + Hash, V> Few<K, V> {
    /// Inserts `v` at `k`; the value it replaces, if any. Into an empty map (an uncontended
    /// pair's every insert) inlined where it is called; the rest is not.
    #[inline]
    pub(crate) fn insert(&mut self, k: K, v: V) -> Option<V> {
        if self.one.is_none() && self.rest.is_empty() {
            self.one = Some((k, v));
            return None;
        }
        self.insert_more(k, v)
    }

    #[inline(never)]
    fn insert_more(&mut self, k: K, v: V) -> Option<V> {
        if let Some((one, was)) = &mut self.one
            && *one == k
        {
            return Some(std::mem::replace(was, v));
        }
        if self.one.is_none() && (self.rest.is_empty() || !self.rest.contains_key(&k)) {
            self.one = Some((k, v));
            return None;
        }
        self.rest.insert(k, v)
    }

    /// The value at `k`, made by `new` when there is none; whether it was made. Into an empty
    /// map inlined, as [`insert`](Self::insert).
    #[inline]
    pub(crate) fn get_or_insert_with(&mut self, k: K, new: impl FnOnce() -> V) -> (&mut V, bool) {
        if self.one.is_none() && self.rest.is_empty() {
            let (_, v) = self.one.insert((k, new()));
            return (v, true);
        }
        self.get_or_insert_more(k, new)
    }

    #[inline(never)]
    fn get_or_insert_more(&mut self, k: K, new: impl FnOnce() -> V) -> (&mut V, bool) {
        let aside = matches!(&self.one, Some((one, _)) if *one == k);
        if !aside && (self.one.is_some() || (!self.rest.is_empty() && self.rest.contains_key(&k))) {
            return match self.rest.entry(k) {
                std::collections::hash_map::Entry::Occupied(held) => (held.into_mut(), false),
                std::collections::hash_map::Entry::Vacant(first) => (first.insert(new()), true),
            };
        }
        // Aside already, or the place aside is free and the key is nowhere.
        let mut made = false;
        let (_, v) = self.one.get_or_insert_with(|| {
            made = true;
            (k, new())
        });
        (v, made)
    }

    pub(crate) fn get(&self, k: &K) -> Option<&V> {
        match &self.one {
            Some((one, v)) if one == k => Some(v),
            _ if self.rest.is_empty() => None,
            _ => self.rest.get(k),
        }
    }

    pub(crate) fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        match &mut self.one {
            Some((one, v)) if one == k => Some(v),
            _ if self.rest.is_empty() => None,
            _ => self.rest.get_mut(k),
        }
    }

    pub(crate) fn contains_key(&self, k: &K) -> bool {
        self.get(k).is_some()
    }

    /// Removes the entry of `k`, with its key.
    pub(crate) fn remove_entry(&mut self, k: &K) -> Option<(K, V)> {
        if self.one.as_ref().is_some_and(|(one, _)| one == k) {
            return self.one.take();
        }
        if self.rest.is_empty() {
            return None;
        }
        self.rest.remove_entry(k)
    }

    pub(crate) fn remove(&mut self, k: &K) -> Option<V> {
        self.remove_entry(k).map(|(_, v)| v)
    }

    pub(crate) fn len(&self) -> usize {
        usize::from(self.one.is_some()) + self.rest.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.one.is_none() && self.rest.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.one = None;
        self.rest.clear();
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        let one = self.one.iter().map(|(k, v)| (k, v));
        one.chain(self.rest.iter())
    }

    /// Every entry, in no particular order, its value mutable.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        let one = self.one.iter_mut().map(|(k, v)| (&*k, v));
        one.chain(self.rest.iter_mut())
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// Takes every entry out, in no particular order.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (K, V)> + use<K, V> {
        let one = self.one.take();
        let rest = std::mem::take(&mut self.rest);
        one.into_iter().chain(rest)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Inserts, replacements, removals and lookups agree with a plain hash map at every step of
    /// a seeded run over a few keys. (The breaks: a key inserted in the table while it is the
    /// entry kept aside, so that a removal leaves it found; a replacement of the entry kept
    /// aside that goes to the table; a lookup that skips the table while the entry aside is
    /// another key's.)
    #[test]
    fn agrees_with_a_hash_map() {
        let mut few: Few<u8, u32> = Few::default();
        let mut model: HashMap<u8, u32> = HashMap::new();
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        for step in 0..20_000u32 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let k = (seed % 5) as u8;
            match (seed >> 8) % 4 {
                0 | 1 => assert_eq!(few.insert(k, step), model.insert(k, step), "step {step}"),
                2 => assert_eq!(few.remove(&k), model.remove(&k), "step {step}"),
                3 if seed & (1 << 60) != 0 => {
                    let (v, made) = few.get_or_insert_with(k, || step);
                    let fresh = !model.contains_key(&k);
                    assert_eq!(
                        (*v, made),
                        (*model.entry(k).or_insert(step), fresh),
                        "step {step}"
                    );
                }
                _ => {
                    if let Some(v) = few.get_mut(&k) {
                        *v += 1;
                    }
                    if let Some(v) = model.get_mut(&k) {
                        *v += 1;
                    }
                }
            }
            assert_eq!(few.len(), model.len(), "step {step}");
            assert_eq!(few.is_empty(), model.is_empty(), "step {step}");
            for k in 0..6 {
                assert_eq!(few.get(&k), model.get(&k), "step {step}, key {k}");
            }
            let mut all: Vec<(u8, u32)> = few.iter().map(|(k, v)| (*k, *v)).collect();
            all.sort_unstable();
            let mut want: Vec<(u8, u32)> = model.iter().map(|(k, v)| (*k, *v)).collect();
            want.sort_unstable();
            assert_eq!(all, want, "step {step}");
        }
        let mut drained: Vec<(u8, u32)> = few.drain().collect();
        drained.sort_unstable();
        let mut want: Vec<(u8, u32)> = model.drain().collect();
        want.sort_unstable();
        assert_eq!(drained, want);
        assert!(few.is_empty());
    }
}
