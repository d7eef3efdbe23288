//! Wire names written once.
//!
//! An enum whose variants travel as strings (JSON bodies, database columns,
//! metric labels) is declared through [`wire_enum!`](crate::wire_enum): each
//! variant names its wire string once, and that one literal becomes both the
//! variant's `#[serde(rename)]` and the arm of its `as_str`, so the two can
//! never drift apart.

/// Declares an enum whose variants carry their wire names: `Variant = "name"`.
///
/// Expands to the enum with `#[serde(rename = "name")]` on every variant
/// (so the enum must derive `Serialize`/`Deserialize` itself, and should not
/// also set `rename_all`), plus three items generated from the same table:
/// `as_str` (the wire name), `from_wire` (its inverse), `ALL` (every
/// variant in declaration order) and `NAMES` (their wire names).
///
/// ```
/// toolgate_contract::wire_enum! {
///     /// Example.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
///     pub enum Colour {
///         /// Red.
///         Red = "red",
///         /// Dark blue.
///         DarkBlue = "dark_blue",
///     }
/// }
/// assert_eq!(Colour::DarkBlue.as_str(), "dark_blue");
/// assert_eq!(serde_json::to_value(Colour::DarkBlue).unwrap(), "dark_blue");
/// assert_eq!(Colour::from_wire("red"), Some(Colour::Red));
/// assert_eq!(Colour::ALL.len(), 2);
/// assert_eq!(Colour::NAMES, ["red", "dark_blue"]);
/// ```
#[macro_export]
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* #[serde(rename = $wire)] $variant ),+
        }

        impl $name {
            /// Every variant, in declaration order.
            $vis const ALL: [Self; [$(stringify!($variant)),+].len()] = [$(Self::$variant),+];

            /// Every wire name, in declaration order (e.g. metric label values).
            $vis const NAMES: [&'static str; [$(stringify!($variant)),+].len()] = [$($wire),+];

            /// The wire name: what serde writes and reads, what is stored
            /// and what metric labels carry.
            $vis fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $wire ),+
                }
            }

            /// The variant whose wire name is `name`, if any.
            $vis fn from_wire(name: &str) -> Option<Self> {
                match name {
                    $( $wire => Some(Self::$variant), )+
                    _ => None,
                }
            }
        }
    };
}
