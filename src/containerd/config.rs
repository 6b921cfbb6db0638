//! [`ContainerdConfig`]: a parsed `config.toml` that can be edited by key path without
//! disturbing anything else in the file. Pure.
//!
//! Paths are lists of keys from the document root, e.g.
//! `["plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "runsc"]`. A table on a
//! path may be spelled any way TOML allows — a `[header]`, dotted keys
//! (`containerd.runtimes.runc.runtime_type = ...`) or an inline table (`runc = { ... }`) — and
//! edits write into whichever form the file already uses. Tables we create are implicit: only
//! a table that ends up holding values gets a `[header]`, placed right after its siblings.
//! Setting a value that is already equal (TOML semantics: `'a'` equals `"a"`) is not a
//! change, so editing an up-to-date file renders it byte-identical.

use toml_edit::{DocumentMut, InlineTable, Item, Table, Value};

use super::{ConfigVersion, Error};

/// What a missing or empty `config.toml` is replaced with before editing.
///
/// Version 2 because every containerd in use reads it: 1.x natively, 2.x by migrating it in
/// memory on load. Only the header: containerd fills in its built-in defaults for everything
/// the file leaves out.
pub const DEFAULT_CONFIG: &str = "\
# Created by gardener-extension-node because this file was missing or empty. containerd uses
# its built-in defaults for everything not set here; version 2 is read by containerd 1.x and
# migrated on load by containerd 2.x.
version = 2
";

/// A parsed containerd configuration and its schema version.
#[derive(Debug, Clone)]
pub struct ContainerdConfig {
    document: DocumentMut,
    version: ConfigVersion,
    from_default: bool,
}

impl ContainerdConfig {
    /// Parses a config file's text and detects its version.
    ///
    /// Fails for invalid TOML and for unknown or malformed `version` values; nothing is
    /// guessed.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let document: DocumentMut = text
            .parse()
            .map_err(|error: toml_edit::TomlError| parse_error(text, &error))?;
        let version = ConfigVersion::detect(&document)?;
        Ok(Self {
            document,
            version,
            from_default: false,
        })
    }

    /// Parses an existing file, or [`DEFAULT_CONFIG`] when the file is missing (`None`) or
    /// holds only whitespace. [`Self::from_default`] tells which happened.
    pub fn parse_or_default(text: Option<&str>) -> Result<Self, Error> {
        match text {
            Some(text) if !text.trim().is_empty() => Self::parse(text),
            _ => {
                let mut config = Self::parse(DEFAULT_CONFIG)?;
                config.from_default = true;
                Ok(config)
            }
        }
    }

    /// True when this config started from [`DEFAULT_CONFIG`] rather than from a file.
    pub fn from_default(&self) -> bool {
        self.from_default
    }

    /// The schema version detected when parsing.
    pub fn version(&self) -> ConfigVersion {
        self.version
    }

    /// The underlying document, for reads this type has no helper for.
    pub fn document(&self) -> &DocumentMut {
        &self.document
    }

    /// The file text: untouched parts exactly as parsed, edits in place.
    pub fn render(&self) -> String {
        self.document.to_string()
    }

    /// The item at `path`, whichever way its tables are spelled; `None` if absent.
    pub fn get(&self, path: &[&str]) -> Option<&Item> {
        let (last, parents) = path.split_last()?;
        let mut table: &dyn toml_edit::TableLike = self.document.as_table();
        for key in parents {
            table = table.get(key)?.as_table_like()?;
        }
        table.get(last).filter(|item| !item.is_none())
    }

    /// The string at `path`, if there is one.
    pub fn get_str(&self, path: &[&str]) -> Option<&str> {
        self.get(path)?.as_str()
    }

    /// True when `path` names a table (of any spelling).
    pub fn has_table(&self, path: &[&str]) -> bool {
        self.get(path).is_some_and(Item::is_table_like)
    }

    /// Sets the value at `path` (its last element is the key), creating missing tables on
    /// the way. Returns whether anything changed: an equal value is left alone, formatting
    /// and comments included; a different one is replaced keeping the old value's comments.
    ///
    /// Fails with [`Error::NotATable`] if a key on the way holds a non-table, leaving the
    /// document unchanged.
    pub fn set_value(&mut self, path: &[&str], value: Value) -> Result<bool, Error> {
        let Some((key, parents)) = path.split_last() else {
            return Ok(false);
        };
        // Check the whole way first so a failure leaves no half-created tables behind.
        self.check_path(parents)?;
        let mut table = TableMut::Standard(self.document.as_table_mut());
        for (depth, parent) in parents.iter().enumerate() {
            table = table
                .child(parent, true, &parents[..=depth])?
                .ok_or_else(|| not_a_table(&parents[..=depth], "nothing"))?;
        }
        let changed = table.set(key, value);
        self.pin_new_tables();
        Ok(changed)
    }

    /// toml_edit renders a table without a position (one we created) right after the table
    /// it visited before it, depth first. When a sub-table of a parent was written above the
    /// parent's own `[header]` in the file, a table we create under that parent would then be
    /// rendered above the parent's header; if the parent defines keys of it with dotted keys
    /// (`containerd.snapshotter = …`), that file is invalid TOML (toml-lang/toml#846) and a
    /// strict parser — containerd's — refuses it. Found by the `containerd_toml` fuzz target.
    /// Pinning such tables to their nearest positioned ancestor renders them after its
    /// section; tables already rendered after it keep their place.
    fn pin_new_tables(&mut self) {
        let mut last = 0;
        pin_positions(self.document.as_table_mut(), None, &mut last);
    }

    /// Removes the item at `path` with everything under it, then every table on the way that
    /// this left empty. Returns whether anything was removed; a missing path is not an error.
    pub fn remove(&mut self, path: &[&str]) -> Result<bool, Error> {
        if path.is_empty() {
            return Ok(false);
        }
        remove_in(
            TableMut::Standard(self.document.as_table_mut()),
            path,
            0,
            path,
        )
    }

    /// Makes sure a table exists at `path` (creating missing tables; the last one gets a
    /// `[header]` even while empty). Returns whether anything was created. Fails with
    /// [`Error::NotATable`] if a key on the way or at `path` holds a non-table, leaving the
    /// document unchanged.
    pub fn ensure_table(&mut self, path: &[&str]) -> Result<bool, Error> {
        if path.is_empty() || self.has_table(path) {
            return Ok(false);
        }
        self.check_path(path)?;
        let mut table = TableMut::Standard(self.document.as_table_mut());
        for (depth, key) in path.iter().enumerate() {
            table = table
                .child(key, true, &path[..=depth])?
                .ok_or_else(|| not_a_table(&path[..=depth], "nothing"))?;
        }
        if let TableMut::Standard(table) = table {
            table.set_implicit(false);
        }
        self.pin_new_tables();
        Ok(true)
    }

    /// The keys of the table at `path` (any spelling), in file order; empty if there is none.
    pub fn table_keys(&self, path: &[&str]) -> Vec<String> {
        let table = if path.is_empty() {
            Some(self.document.as_table() as &dyn toml_edit::TableLike)
        } else {
            self.get(path).and_then(Item::as_table_like)
        };
        table
            .map(|table| {
                table
                    .iter()
                    .filter(|(_, item)| !item.is_none())
                    .map(|(key, _)| key.to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Fails if a key on `path` holds something other than a table.
    fn check_path(&self, path: &[&str]) -> Result<(), Error> {
        let mut table: &dyn toml_edit::TableLike = self.document.as_table();
        for (depth, key) in path.iter().enumerate() {
            match table.get(key) {
                None | Some(Item::None) => return Ok(()),
                Some(item) => {
                    table = item
                        .as_table_like()
                        .ok_or_else(|| not_a_table(&path[..=depth], item.type_name()))?;
                }
            }
        }
        Ok(())
    }
}

/// Walks the tables in toml_edit's rendering order (see [`ContainerdConfig::pin_new_tables`]),
/// tracking the position each table would be sorted by (`last`).
fn pin_positions(table: &mut Table, ancestor: Option<isize>, last: &mut isize) {
    let mut ancestor = ancestor;
    if !table.is_dotted() {
        match table.position() {
            Some(position) => {
                *last = position;
                ancestor = Some(position);
            }
            None => {
                if let Some(position) = ancestor
                    && *last < position
                {
                    table.set_position(Some(position));
                    *last = position;
                }
            }
        }
    }
    for (_, item) in table.iter_mut() {
        match item {
            Item::Table(child) => pin_positions(child, ancestor, last),
            Item::ArrayOfTables(array) => {
                for child in array.iter_mut() {
                    pin_positions(child, ancestor, last);
                }
            }
            _ => {}
        }
    }
}

/// Removes `path[depth..]` below `table`, pruning tables left empty. `full` is for messages.
fn remove_in(
    mut table: TableMut<'_>,
    path: &[&str],
    depth: usize,
    full: &[&str],
) -> Result<bool, Error> {
    let Some((key, rest)) = path.split_first() else {
        return Ok(false);
    };
    if rest.is_empty() {
        return Ok(table.remove(key));
    }
    let removed = match table.reborrow().child(key, false, &full[..=depth])? {
        Some(child) => remove_in(child, rest, depth + 1, full)?,
        None => false,
    };
    if removed && table.child_is_empty_table(key) {
        table.remove(key);
    }
    Ok(removed)
}

/// A mutable table in either of its spellings.
enum TableMut<'a> {
    /// A `[header]` table, a dotted-key table or the document root.
    Standard(&'a mut Table),
    /// An inline `{ ... }` table.
    Inline(&'a mut InlineTable),
}

impl<'a> TableMut<'a> {
    fn reborrow(&mut self) -> TableMut<'_> {
        match self {
            TableMut::Standard(table) => TableMut::Standard(table),
            TableMut::Inline(table) => TableMut::Inline(table),
        }
    }

    /// The sub-table at `key`, created (implicit, or inline inside inline tables) when
    /// missing and `create` is set. `path` is the key's full path, for the error.
    fn child(self, key: &str, create: bool, path: &[&str]) -> Result<Option<TableMut<'a>>, Error> {
        match self {
            TableMut::Standard(table) => {
                if !table.contains_key(key) {
                    if !create {
                        return Ok(None);
                    }
                    let mut child = Table::new();
                    child.set_implicit(true);
                    table.insert(key, Item::Table(child));
                }
                match table.get_mut(key) {
                    Some(Item::Table(child)) => Ok(Some(TableMut::Standard(child))),
                    Some(Item::Value(Value::InlineTable(child))) => {
                        Ok(Some(TableMut::Inline(child)))
                    }
                    Some(other) => Err(not_a_table(path, other.type_name())),
                    None => Ok(None),
                }
            }
            TableMut::Inline(table) => {
                if !table.contains_key(key) {
                    if !create {
                        return Ok(None);
                    }
                    table.insert(key, Value::InlineTable(InlineTable::new()));
                }
                match table.get_mut(key) {
                    Some(Value::InlineTable(child)) => Ok(Some(TableMut::Inline(child))),
                    Some(other) => Err(not_a_table(path, other.type_name())),
                    None => Ok(None),
                }
            }
        }
    }

    /// Sets `key` to `value` unless an equal value is there; true if it changed.
    fn set(self, key: &str, value: Value) -> bool {
        let existing = match self {
            TableMut::Standard(table) => match table.get_mut(key) {
                Some(Item::Value(existing)) => existing,
                _ => {
                    table.insert(key, Item::Value(value));
                    return true;
                }
            },
            TableMut::Inline(table) => match table.get_mut(key) {
                Some(existing) => existing,
                None => {
                    table.insert(key, value);
                    return true;
                }
            },
        };
        if values_equal(existing, &value) {
            return false;
        }
        // Keep the comments and spacing around the old value.
        let decor = existing.decor().clone();
        *existing = value;
        *existing.decor_mut() = decor;
        true
    }

    fn remove(&mut self, key: &str) -> bool {
        match self {
            TableMut::Standard(table) => table.remove(key).is_some_and(|item| !item.is_none()),
            TableMut::Inline(table) => table.remove(key).is_some(),
        }
    }

    fn child_is_empty_table(&self, key: &str) -> bool {
        match self {
            TableMut::Standard(table) => table
                .get(key)
                .and_then(Item::as_table_like)
                .is_some_and(|child| child.is_empty()),
            TableMut::Inline(table) => table
                .get(key)
                .and_then(Value::as_inline_table)
                .is_some_and(InlineTable::is_empty),
        }
    }
}

/// Equality of TOML values by meaning, ignoring formatting (quote style, spacing, order of
/// inline table keys).
pub fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(a), Value::String(b)) => a.value() == b.value(),
        (Value::Integer(a), Value::Integer(b)) => a.value() == b.value(),
        (Value::Float(a), Value::Float(b)) => a.value().to_bits() == b.value().to_bits(),
        (Value::Boolean(a), Value::Boolean(b)) => a.value() == b.value(),
        (Value::Datetime(a), Value::Datetime(b)) => a.value() == b.value(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b.iter()).all(|(a, b)| values_equal(a, b))
        }
        (Value::InlineTable(a), Value::InlineTable(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(key, value)| b.get(key).is_some_and(|other| values_equal(value, other)))
        }
        _ => false,
    }
}

/// A key path as TOML would write it: `plugins."io.containerd.grpc.v1.cri".containerd`.
pub fn display_path(path: &[&str]) -> String {
    path.iter()
        .map(|key| {
            let bare = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if bare {
                (*key).to_string()
            } else {
                format!("{:?}", key)
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn not_a_table(path: &[&str], found: &'static str) -> Error {
    Error::NotATable {
        path: display_path(path),
        found,
    }
}

/// [`Error::Parse`] for `error` in `text`: line, column and the parser's reason, never the
/// source line itself (toml_edit's `Display` quotes it).
fn parse_error(text: &str, error: &toml_edit::TomlError) -> Error {
    let offset = error.span().map_or(0, |span| span.start).min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |index| index + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    let reason = error
        .message()
        .lines()
        .next()
        .unwrap_or("syntax error")
        .to_string();
    Error::Parse {
        line,
        column,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (found by the `containerd_toml` fuzz target): with a CRI sub-table written
    /// above the CRI plugin's own header, which sets `containerd.*` with dotted keys, the new
    /// runtime tables were rendered above that header — invalid TOML for strict parsers.
    #[test]
    fn new_tables_render_after_a_parent_with_dotted_keys() {
        let text = "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"docker.io\"]\n  endpoint = [\"https://mirror.example\"]\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  containerd.snapshotter = \"overlayfs\"\n";
        let mut config = ContainerdConfig::parse(text).unwrap_or_else(|e| panic!("{e}"));
        let runtime_type = with_key(&RUNSC, "runtime_type");
        config
            .set_value(&runtime_type, Value::from("io.containerd.runsc.v1"))
            .unwrap_or_else(|e| panic!("{e}"));
        let out = config.render();
        let parent = out
            .find("[plugins.\"io.containerd.grpc.v1.cri\"]\n")
            .unwrap_or_else(|| panic!("{out}"));
        let runsc = out
            .find("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc]")
            .unwrap_or_else(|| panic!("{out}"));
        assert!(parent < runsc, "runsc above its parent's header:\n{out}");
        assert!(
            out.starts_with(text),
            "the file's own text is unchanged:\n{out}"
        );
        let again = ContainerdConfig::parse(&out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            again.get_str(&runtime_type),
            Some("io.containerd.runsc.v1"),
            "{out}"
        );
    }

    const RUNSC: [&str; 5] = [
        "plugins",
        "io.containerd.grpc.v1.cri",
        "containerd",
        "runtimes",
        "runsc",
    ];

    fn with_key<'a>(path: &[&'a str], key: &'a str) -> Vec<&'a str> {
        let mut path = path.to_vec();
        path.push(key);
        path
    }

    #[test]
    fn missing_or_blank_text_starts_from_the_default() {
        for text in [None, Some(""), Some("  \n\n")] {
            let config = ContainerdConfig::parse_or_default(text).unwrap();
            assert!(config.from_default());
            assert_eq!(config.version(), ConfigVersion::V2);
            assert_eq!(config.render(), DEFAULT_CONFIG);
        }
        let config = ContainerdConfig::parse_or_default(Some("version = 3\n")).unwrap();
        assert!(!config.from_default());
        assert_eq!(config.version(), ConfigVersion::V3);
    }

    #[test]
    fn parse_errors_give_the_position_but_not_the_line() {
        let text = "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".registry.configs.\"r\".auth]\n  username = \"u\"\n  password = \"S3CRET-hunter2\n";
        let error = ContainerdConfig::parse(text).unwrap_err();
        let Error::Parse { line, column, .. } = &error else {
            panic!("expected a parse error, got {error:?}");
        };
        assert_eq!(*line, 5, "{error}");
        assert!(*column > 1, "{error}");
        let mut chain = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            chain.push_str(&cause.to_string());
            source = cause.source();
        }
        assert!(!chain.contains("S3CRET"), "{chain}");
        assert!(!chain.contains("password"), "{chain}");
        assert!(chain.contains("line 5, column"), "{chain}");
    }

    #[test]
    fn parse_errors_name_the_problem() {
        let error = ContainerdConfig::parse("[plugins\n").unwrap_err();
        assert!(matches!(error, Error::Parse { line: 1, .. }), "{error:?}");
        assert!(error.to_string().contains("not valid TOML"));
        let error = ContainerdConfig::parse("version = 7\n").unwrap_err();
        assert!(error.to_string().contains("version = 7"));
        assert!(error.is_config_problem());
    }

    #[test]
    fn set_value_creates_tables_with_a_header_only_where_values_are() {
        let mut config = ContainerdConfig::parse("version = 2\n").unwrap();
        let changed = config
            .set_value(
                &with_key(&RUNSC, "runtime_type"),
                "io.containerd.runsc.v1".into(),
            )
            .unwrap();
        assert!(changed);
        assert_eq!(
            config.render(),
            "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc]\nruntime_type = \"io.containerd.runsc.v1\"\n"
        );
        assert_eq!(
            config.get_str(&with_key(&RUNSC, "runtime_type")),
            Some("io.containerd.runsc.v1")
        );
        assert!(config.has_table(&RUNSC));
    }

    #[test]
    fn equal_value_in_another_quote_style_is_no_change() {
        let text = "[a]\nkey = 'x' # keep me\n";
        let mut config = ContainerdConfig::parse(text).unwrap();
        assert!(!config.set_value(&["a", "key"], "x".into()).unwrap());
        assert_eq!(config.render(), text);
    }

    #[test]
    fn changed_value_keeps_its_comment() {
        let mut config = ContainerdConfig::parse("[a]\nkey = \"x\" # keep me\n").unwrap();
        assert!(config.set_value(&["a", "key"], "y".into()).unwrap());
        assert_eq!(config.render(), "[a]\nkey = \"y\" # keep me\n");
    }

    #[test]
    fn writes_into_dotted_and_inline_spellings() {
        let text = "[plugins.x]\ncontainerd.runtimes.runc.runtime_type = \"r\"\n";
        let mut config = ContainerdConfig::parse(text).unwrap();
        let path = [
            "plugins",
            "x",
            "containerd",
            "runtimes",
            "runc",
            "runtime_type",
        ];
        assert!(!config.set_value(&path, "r".into()).unwrap());
        assert!(config.set_value(&path, "s".into()).unwrap());
        assert_eq!(
            config.render(),
            "[plugins.x]\ncontainerd.runtimes.runc.runtime_type = \"s\"\n"
        );

        let text = "[plugins.x.containerd]\nruntimes = { runc = { runtime_type = \"r\" } }\n";
        let mut config = ContainerdConfig::parse(text).unwrap();
        let path = [
            "plugins",
            "x",
            "containerd",
            "runtimes",
            "runsc",
            "runtime_type",
        ];
        assert!(config.set_value(&path, "s".into()).unwrap());
        let rendered = config.render();
        let reparsed = ContainerdConfig::parse(&rendered).unwrap();
        assert_eq!(reparsed.get_str(&path), Some("s"));
        assert_eq!(
            reparsed.get_str(&[
                "plugins",
                "x",
                "containerd",
                "runtimes",
                "runc",
                "runtime_type"
            ]),
            Some("r")
        );
        assert!(rendered.contains("runtimes = { runc = { runtime_type = \"r\" }"));
    }

    #[test]
    fn a_value_where_a_table_is_needed_is_an_error_and_changes_nothing() {
        let text = "[plugins]\n\"io.containerd.grpc.v1.cri\" = \"oops\"\n";
        let mut config = ContainerdConfig::parse(text).unwrap();
        let error = config
            .set_value(&with_key(&RUNSC, "runtime_type"), "x".into())
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "containerd config: `plugins.\"io.containerd.grpc.v1.cri\"` must be a table but is a string; fix or remove that key"
        );
        assert_eq!(config.render(), text);
        assert!(config.remove(&RUNSC).is_err());
    }

    #[test]
    fn remove_prunes_tables_it_emptied_and_keeps_the_rest() {
        let text = "\
version = 2
# about cri
[plugins.\"io.containerd.grpc.v1.cri\"]
  sandbox_image = \"pause\"

[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc]
  runtime_type = \"io.containerd.runsc.v1\"
[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc.options]
  TypeUrl = \"io.containerd.runsc.v1.options\"

[plugins.other] # trailing
  x = 1
";
        let mut config = ContainerdConfig::parse(text).unwrap();
        assert!(config.remove(&RUNSC).unwrap());
        assert_eq!(
            config.render(),
            "\
version = 2
# about cri
[plugins.\"io.containerd.grpc.v1.cri\"]
  sandbox_image = \"pause\"

[plugins.other] # trailing
  x = 1
"
        );
        assert!(!config.has_table(&["plugins", "io.containerd.grpc.v1.cri", "containerd"]));
        assert!(!config.remove(&RUNSC).unwrap(), "second removal is a no-op");
    }

    #[test]
    fn remove_keeps_tables_that_still_hold_something() {
        let text = "[a.b]\nx = 1\n[a.b.c]\ny = 2\n";
        let mut config = ContainerdConfig::parse(text).unwrap();
        assert!(config.remove(&["a", "b", "c"]).unwrap());
        assert_eq!(config.render(), "[a.b]\nx = 1\n");
        assert!(!config.remove(&["a", "missing", "c"]).unwrap());
        assert!(config.remove(&["a", "b", "x"]).unwrap());
        assert_eq!(config.render(), "");
    }

    #[test]
    fn values_compare_by_meaning() {
        let parse = |s: &str| s.parse::<Value>().unwrap();
        assert!(values_equal(&parse("'a'"), &parse("\"a\"")));
        assert!(values_equal(&parse("[1, 2]"), &parse("[ 1,2 ]")));
        assert!(values_equal(
            &parse("{ a = 1, b = 'x' }"),
            &parse("{b=\"x\",a=1}")
        ));
        assert!(!values_equal(
            &parse("{ a = 1 }"),
            &parse("{ a = 1, b = 2 }")
        ));
        assert!(!values_equal(&parse("1"), &parse("'1'")));
        assert!(!values_equal(&parse("true"), &parse("false")));
    }

    #[test]
    fn paths_display_like_toml_keys() {
        assert_eq!(
            display_path(&RUNSC),
            "plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runsc"
        );
        assert_eq!(display_path(&["a b", ""]), "\"a b\".\"\"");
    }
}
