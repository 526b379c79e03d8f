//! The submission as it arrives: serde wire types that borrow from the JSON
//! body. Reading them checks the shape alone: each value's JSON type
//! (`expected a string, got a number`, at the path of the value) and every
//! unknown field, each with its path (`file_actions[0].last_commit_id`). The
//! garde rules on these types ([`super::rules`]) then check the values.
//!
//! Unknown members are collected through `serde_ignored` rather than
//! refused by `#[serde(deny_unknown_fields)]`, which stops at the first one:
//! a submission's answer names every unknown member beside every other
//! refusal.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::marker::PhantomData;
use std::ops::Deref;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use wq_forge::FileOp;

use super::FieldError;
use super::rules::{self, Scope};

/// The body of a submission (see the module documentation of
/// [`crate::spec`]). Every member is optional here: `required` is a rule,
/// so that a missing member is reported beside every other refusal.
#[derive(Deserialize, garde::Validate)]
#[garde(context(Scope<'a> as scope))]
pub(super) struct WireSubmission<'a> {
    /// The API routes the body by it before it gets here.
    #[expect(
        dead_code,
        reason = "a known member, read by the API; here only not an unknown one"
    )]
    #[serde(borrow)]
    #[garde(skip)]
    pub item_type: Option<Text<'a>>,
    #[serde(borrow)]
    #[garde(custom(rules::forge))]
    pub forge: Option<Text<'a>>,
    #[serde(borrow)]
    #[garde(custom(rules::project))]
    pub project: Option<Text<'a>>,
    #[serde(borrow)]
    #[garde(
        custom(rules::branch),
        custom(rules::differs_from(&self.target_branch)),
        custom(rules::unprotected)
    )]
    pub source_branch: Option<Text<'a>>,
    #[serde(borrow)]
    #[garde(custom(rules::branch))]
    pub target_branch: Option<Text<'a>>,
    #[serde(borrow)]
    #[garde(custom(rules::title))]
    pub title: Option<Text<'a>>,
    #[serde(borrow)]
    #[garde(custom(rules::description))]
    pub description: Option<Text<'a>>,
    #[serde(borrow)]
    #[garde(custom(rules::commit_message))]
    pub commit_message: Option<Text<'a>>,
    #[serde(borrow)]
    #[garde(dive)]
    pub labels: Option<Labels<'a>>,
    #[garde(skip)]
    pub automation: Option<Object<WireAutomation>>,
    #[serde(borrow)]
    #[garde(dive, custom(rules::required))]
    pub file_actions: Option<FileActions<'a>>,
}

/// `labels`, an array of strings; their rules ([`rules`]) look at all of
/// them at once.
pub(super) struct Labels<'a>(pub Vec<Text<'a>>);

/// `automation`; a member left out keeps its default.
#[derive(Deserialize)]
pub(super) struct WireAutomation {
    pub auto_merge: Option<Flag>,
    pub ci_retry: Option<Flag>,
}

/// `file_actions`, an array of objects; their rules ([`rules`]) look at all
/// of them at once.
pub(super) struct FileActions<'a>(pub Vec<Object<WireFileAction<'a>>>);

/// One member of `file_actions`.
#[derive(Deserialize, garde::Validate)]
#[garde(context(Scope<'a> as scope))]
pub(super) struct WireFileAction<'a> {
    #[serde(borrow)]
    #[garde(custom(rules::action))]
    pub action: Option<Text<'a>>,
    #[serde(borrow)]
    #[garde(custom(rules::file_path))]
    pub file_path: Option<Text<'a>>,
    #[serde(borrow)]
    #[garde(custom(rules::previous_path(self)))]
    pub previous_path: Option<Text<'a>>,
    #[serde(borrow)]
    #[garde(custom(rules::encoding))]
    pub encoding: Option<Text<'a>>,
    #[serde(borrow)]
    #[garde(custom(rules::content(self)))]
    pub content: Option<Text<'a>>,
    #[garde(custom(rules::execute_filemode(self)))]
    pub execute_filemode: Option<Flag>,
    /// `content` decoded, once, by the first rule that needs the bytes.
    #[serde(skip)]
    #[garde(skip)]
    decoded: OnceCell<Option<Result<Vec<u8>, String>>>,
}

/// How `content` is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Encoding {
    Text,
    Base64,
}

impl WireFileAction<'_> {
    /// `action` as an operation; `None` when it is missing or unknown.
    pub fn op(&self) -> Option<FileOp> {
        file_op(self.action.as_deref()?)
    }

    /// `encoding` (text when left out); `None` when it is unknown.
    pub fn encoding(&self) -> Option<Encoding> {
        self.encoding
            .as_deref()
            .map_or(Some(Encoding::Text), encoding)
    }

    /// The decoded `content`, or why it does not decode. `None` when there
    /// is no content to decode: none given, an action that takes none, or
    /// an unknown encoding (each refused by its own rule).
    pub fn decoded(&self) -> Option<&Result<Vec<u8>, String>> {
        self.decoded
            .get_or_init(|| {
                if matches!(self.op(), Some(FileOp::Delete | FileOp::Chmod)) {
                    return None;
                }
                Some(decode(self.content.as_deref()?, self.encoding()?))
            })
            .as_ref()
    }

    /// The decoded content, taken out.
    pub fn take_decoded(&mut self) -> Option<Result<Vec<u8>, String>> {
        self.decoded();
        self.decoded.take().flatten()
    }
}

/// An `action` value as an operation.
pub(super) fn file_op(action: &str) -> Option<FileOp> {
    Some(match action {
        "create" => FileOp::Create,
        "update" => FileOp::Update,
        "delete" => FileOp::Delete,
        "move" => FileOp::Move,
        "chmod" => FileOp::Chmod,
        _ => return None,
    })
}

/// An `encoding` value.
pub(super) fn encoding(name: &str) -> Option<Encoding> {
    match name {
        "text" => Some(Encoding::Text),
        "base64" => Some(Encoding::Base64),
        _ => None,
    }
}

fn decode(text: &str, encoding: Encoding) -> Result<Vec<u8>, String> {
    match encoding {
        Encoding::Text => Ok(text.as_bytes().to_vec()),
        Encoding::Base64 => {
            // Line breaks are tolerated: many encoders wrap at 76 columns.
            let compact: Vec<u8> = text
                .bytes()
                .filter(|byte| !matches!(byte, b'\r' | b'\n'))
                .collect();
            STANDARD
                .decode(&compact)
                .map_err(|error| format!("invalid base64: {error}"))
        }
    }
}

/// Reads the wire form of `body`. Every unknown field is pushed onto
/// `errors` with its path, and so is the first value of a wrong JSON type;
/// `None` when there was one (the body has no wire form then).
pub(super) fn read<'a>(
    body: &'a serde_json::Value,
    errors: &mut Vec<FieldError>,
) -> Option<WireSubmission<'a>> {
    let mut unknown = |path: serde_ignored::Path<'_>| {
        errors.push(FieldError::new(path_text(&path), "unknown field"));
    };
    let result =
        serde_path_to_error::deserialize(serde_ignored::Deserializer::new(body, &mut unknown));
    match result {
        Ok(wire) => Some(wire),
        Err(error) => {
            let field = error.path().to_string();
            errors.push(FieldError::new(field, error.into_inner().to_string()));
            None
        }
    }
}

/// `file_actions[0].last_commit_id`, the spelling of
/// [`serde_path_to_error`] and garde.
fn path_text(path: &serde_ignored::Path<'_>) -> String {
    match path {
        serde_ignored::Path::Root => String::new(),
        serde_ignored::Path::Seq { parent, index } => format!("{}[{index}]", path_text(parent)),
        serde_ignored::Path::Map { parent, key } => match path_text(parent) {
            parent if parent.is_empty() => key.clone(),
            parent => format!("{parent}.{key}"),
        },
        serde_ignored::Path::Some { parent }
        | serde_ignored::Path::NewtypeStruct { parent }
        | serde_ignored::Path::NewtypeVariant { parent } => path_text(parent),
    }
}

/// A JSON string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Text<'a>(pub Cow<'a, str>);

impl Deref for Text<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

/// A JSON boolean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Flag(pub bool);

/// A JSON object, read into the derived `T`.
#[derive(Debug)]
pub(super) struct Object<T>(pub T);

/// A wire value of one JSON kind. Each other kind is refused as
/// `expected {EXPECTED}, got {kind}`; the default methods refuse.
trait JsonKind<'de>: Sized {
    /// What the value must be: `a string`.
    const EXPECTED: &'static str;

    fn from_string<E: de::Error>(_text: Cow<'de, str>) -> Result<Self, E> {
        Err(refused::<Self, E>("a string"))
    }

    fn from_bool<E: de::Error>(_value: bool) -> Result<Self, E> {
        Err(refused::<Self, E>("a boolean"))
    }

    fn from_array<A: SeqAccess<'de>>(_items: A) -> Result<Self, A::Error> {
        Err(refused::<Self, A::Error>("an array"))
    }

    fn from_object<A: MapAccess<'de>>(_members: A) -> Result<Self, A::Error> {
        Err(refused::<Self, A::Error>("an object"))
    }
}

fn refused<'de, T: JsonKind<'de>, E: de::Error>(got: &str) -> E {
    E::custom(format_args!("expected {}, got {got}", T::EXPECTED))
}

impl<'de: 'a, 'a> JsonKind<'de> for Text<'a> {
    const EXPECTED: &'static str = "a string";

    fn from_string<E: de::Error>(text: Cow<'de, str>) -> Result<Self, E> {
        Ok(Text(text))
    }
}

impl JsonKind<'_> for Flag {
    const EXPECTED: &'static str = "a boolean";

    fn from_bool<E: de::Error>(value: bool) -> Result<Self, E> {
        Ok(Flag(value))
    }
}

impl<'de: 'a, 'a> JsonKind<'de> for Labels<'a> {
    const EXPECTED: &'static str = "an array of strings";

    fn from_array<A: SeqAccess<'de>>(items: A) -> Result<Self, A::Error> {
        collect(items).map(Labels)
    }
}

impl<'de: 'a, 'a> JsonKind<'de> for FileActions<'a> {
    const EXPECTED: &'static str = "an array";

    fn from_array<A: SeqAccess<'de>>(items: A) -> Result<Self, A::Error> {
        collect(items).map(FileActions)
    }
}

fn collect<'de, T: Deserialize<'de>, A: SeqAccess<'de>>(mut items: A) -> Result<Vec<T>, A::Error> {
    // The hint comes from the caller's body: trust it only so far.
    let mut list = Vec::with_capacity(items.size_hint().unwrap_or(0).min(1024));
    while let Some(item) = items.next_element()? {
        list.push(item);
    }
    Ok(list)
}

impl<'de, T: Deserialize<'de>> JsonKind<'de> for Object<T> {
    const EXPECTED: &'static str = "an object";

    fn from_object<A: MapAccess<'de>>(members: A) -> Result<Self, A::Error> {
        T::deserialize(MapAccessDeserializer::new(members)).map(Object)
    }
}

/// Reads any JSON value and hands it to `T` by its kind.
struct KindVisitor<T>(PhantomData<T>);

impl<'de, T: JsonKind<'de>> Visitor<'de> for KindVisitor<T> {
    type Value = T;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(T::EXPECTED)
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<T, E> {
        T::from_bool(value)
    }

    fn visit_i64<E: de::Error>(self, _value: i64) -> Result<T, E> {
        Err(refused::<T, E>("a number"))
    }

    fn visit_u64<E: de::Error>(self, _value: u64) -> Result<T, E> {
        Err(refused::<T, E>("a number"))
    }

    fn visit_f64<E: de::Error>(self, _value: f64) -> Result<T, E> {
        Err(refused::<T, E>("a number"))
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<T, E> {
        T::from_string(Cow::Borrowed(text))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
        T::from_string(Cow::Owned(text.to_owned()))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<T, E> {
        T::from_string(Cow::Owned(text))
    }

    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Err(refused::<T, E>("null"))
    }

    fn visit_none<E: de::Error>(self) -> Result<T, E> {
        Err(refused::<T, E>("null"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, items: A) -> Result<T, A::Error> {
        T::from_array(items)
    }

    fn visit_map<A: MapAccess<'de>>(self, members: A) -> Result<T, A::Error> {
        T::from_object(members)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KindVisitor(PhantomData))
    }
}

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KindVisitor(PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Labels<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KindVisitor(PhantomData))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for FileActions<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KindVisitor(PhantomData))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KindVisitor(PhantomData))
    }
}
