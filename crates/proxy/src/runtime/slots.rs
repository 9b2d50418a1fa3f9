//! A vector of reusable slots: an index for each live client, no hashing, and memory that stays at one word
//! or two per client however many come and go. Used where thousands of idle clients each keep an entry.

/// Values stored at small reusable indices.
#[derive(Debug)]
pub(crate) struct Slots<T> {
    entries: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots { entries: Vec::new(), free: Vec::new() }
    }
}

impl<T> Slots<T> {
    /// Stores `value` and returns its index.
    pub(crate) fn insert(&mut self, value: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.entries[i as usize] = Some(value);
                i
            }
            None => {
                self.entries.push(Some(value));
                (self.entries.len() - 1) as u32
            }
        }
    }

    /// Replaces the value at a live index.
    pub(crate) fn set(&mut self, index: u32, value: T) {
        if let Some(slot) = self.entries.get_mut(index as usize) {
            *slot = Some(value);
        }
    }

    /// Takes the value out and frees the index for reuse.
    pub(crate) fn remove(&mut self, index: u32) -> Option<T> {
        let value = self.entries.get_mut(index as usize)?.take();
        if value.is_some() {
            self.free.push(index);
        }
        value
    }

    pub(crate) fn get_mut(&mut self, index: u32) -> Option<&mut T> {
        self.entries.get_mut(index as usize)?.as_mut()
    }

    /// Every stored value, in index order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().flatten()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_reused_after_removal() {
        let mut s = Slots::default();
        let a = s.insert("a");
        let b = s.insert("b");
        assert_eq!((a, b), (0, 1));
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.remove(a), None, "removing twice frees once");
        assert_eq!(s.insert("c"), 0);
        assert_eq!(s.get_mut(0), Some(&mut "c"));
        s.set(1, "B");
        assert_eq!(s.values().copied().collect::<Vec<_>>(), vec!["c", "B"]);
        assert_eq!(s.len(), 2);
        assert_eq!(s.get_mut(7), None);
    }
}
