//! Labelled families whose label values are a closed set known when pgmux is compiled (close reasons, pin
//! reasons, client states). A value is an enum; recording indexes an array with it: no hashing, no map, no
//! allocation, one relaxed atomic.

use std::fmt;
use std::marker::PhantomData;

use crate::scalar::{Counter, Gauge};

/// A label whose values are the variants of an enum. Implement it with [`label_enum!`](crate::label_enum).
pub trait Label: Copy + fmt::Debug + Send + Sync + 'static {
    /// The label's name in the exposition, e.g. `reason`.
    const NAME: &'static str;
    /// Every value, in exposition order; `index()` is the position in this list.
    const ALL: &'static [Self];
    /// The position of this value in [`Label::ALL`].
    fn index(self) -> usize;
    /// The label value as exposed, e.g. `idle_timeout`.
    fn as_str(self) -> &'static str;
}

/// Declares an enum and implements [`Label`] for it: each variant gets the label value written after `=>`,
/// and the label its name after the enum's name.
///
/// ```
/// pgmux_metrics::label_enum! {
///     /// Why a server connection was closed.
///     pub enum Closed: "reason" {
///         Idle => "idle_timeout",
///         Broken => "broken",
///     }
/// }
/// use pgmux_metrics::Label;
/// assert_eq!(Closed::Broken.as_str(), "broken");
/// assert_eq!(Closed::ALL.len(), 2);
/// ```
#[macro_export]
macro_rules! label_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident : $label:literal {
            $( $(#[$vmeta:meta])* $variant:ident => $value:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $crate::Label for $name {
            const NAME: &'static str = $label;
            const ALL: &'static [Self] = &[$($name::$variant),+];
            #[inline]
            fn index(self) -> usize {
                self as usize
            }
            fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $value ),+
                }
            }
        }
    };
}

/// One counter per value of `L`.
pub struct CounterFamily<L: Label> {
    counters: Box<[Counter]>,
    label: PhantomData<L>,
}

impl<L: Label> CounterFamily<L> {
    pub fn new() -> Self {
        CounterFamily { counters: L::ALL.iter().map(|_| Counter::new()).collect(), label: PhantomData }
    }

    #[inline]
    pub fn inc(&self, value: L) {
        self.counters[value.index()].inc();
    }

    #[inline]
    pub fn add(&self, value: L, n: u64) {
        self.counters[value.index()].add(n);
    }

    pub fn get(&self, value: L) -> u64 {
        self.counters[value.index()].get()
    }

    /// Every label value with its count, in [`Label::ALL`] order.
    pub fn values(&self) -> Vec<(L, u64)> {
        L::ALL.iter().map(|&l| (l, self.get(l))).collect()
    }

    /// The sum over all label values.
    pub fn total(&self) -> u64 {
        self.counters.iter().map(Counter::get).sum()
    }
}

impl<L: Label> Default for CounterFamily<L> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: Label> fmt::Debug for CounterFamily<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.values().into_iter().map(|(l, v)| (l.as_str(), v))).finish()
    }
}

/// One gauge per value of `L`.
pub struct GaugeFamily<L: Label> {
    gauges: Box<[Gauge]>,
    label: PhantomData<L>,
}

impl<L: Label> GaugeFamily<L> {
    pub fn new() -> Self {
        GaugeFamily { gauges: L::ALL.iter().map(|_| Gauge::new()).collect(), label: PhantomData }
    }

    #[inline]
    pub fn inc(&self, value: L) {
        self.gauges[value.index()].inc();
    }

    #[inline]
    pub fn dec(&self, value: L) {
        self.gauges[value.index()].dec();
    }

    /// Moves one from `from` to `to` (a client that stops waiting and becomes active).
    #[inline]
    pub fn shift(&self, from: L, to: L) {
        self.dec(from);
        self.inc(to);
    }

    pub fn set(&self, value: L, v: i64) {
        self.gauges[value.index()].set(v);
    }

    pub fn get(&self, value: L) -> i64 {
        self.gauges[value.index()].get()
    }

    /// Every label value with its gauge, in [`Label::ALL`] order.
    pub fn values(&self) -> Vec<(L, i64)> {
        L::ALL.iter().map(|&l| (l, self.get(l))).collect()
    }

    /// The sum over all label values.
    pub fn total(&self) -> i64 {
        self.gauges.iter().map(Gauge::get).sum()
    }
}

impl<L: Label> Default for GaugeFamily<L> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: Label> fmt::Debug for GaugeFamily<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.values().into_iter().map(|(l, v)| (l.as_str(), v))).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::label_enum! {
        /// A test label.
        enum State: "state" {
            Active => "active",
            Waiting => "waiting",
            Idle => "idle",
        }
    }

    #[test]
    fn each_value_has_its_own_counter() {
        let f = CounterFamily::<State>::new();
        f.inc(State::Waiting);
        f.add(State::Idle, 5);
        assert_eq!(f.values(), vec![(State::Active, 0), (State::Waiting, 1), (State::Idle, 5)]);
        assert_eq!(f.total(), 6);
        assert_eq!(format!("{f:?}"), r#"{"active": 0, "waiting": 1, "idle": 5}"#);
    }

    #[test]
    fn gauges_shift_between_values() {
        let g = GaugeFamily::<State>::new();
        g.inc(State::Waiting);
        g.shift(State::Waiting, State::Active);
        assert_eq!((g.get(State::Waiting), g.get(State::Active)), (0, 1));
        g.set(State::Idle, 9);
        assert_eq!(g.total(), 10);
    }

    #[test]
    fn the_macro_numbers_variants_in_order() {
        assert_eq!(State::NAME, "state");
        for (i, s) in State::ALL.iter().enumerate() {
            assert_eq!(s.index(), i);
        }
        assert_eq!(State::Idle.as_str(), "idle");
    }

    #[test]
    fn families_are_sync() {
        fn sync<T: Sync + Send>() {}
        sync::<CounterFamily<State>>();
        sync::<GaugeFamily<State>>();
    }
}
