//! Reads a crate's source the way the compiler finds it: from its root file along `mod`
//! declarations, recording every path that leaves the module it is written in.

use std::path::{Path, PathBuf};

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::visit::{self, Visit};

/// One path written in the code, with where it was written.
#[derive(Clone, Debug)]
pub struct Reference {
    /// The module it is written in, from the crate root (`["ingest", "parsers", "source_a"]`).
    pub module: Vec<String>,
    /// Its segments as written (`["crate", "state", "AppState"]`, `["super", "tools"]`).
    pub segments: Vec<String>,
    /// Relative to the workspace root.
    pub file: String,
    pub line: usize,
    /// Under `#[cfg(test)]` (an item, or a module declared under it).
    pub test: bool,
}

impl Reference {
    /// The top-level module this path names when it is crate-relative (`crate::`, `super::`,
    /// `self::`); `None` for a path into another crate or a local name.
    pub fn top_level_target(&self) -> Option<&str> {
        match self.segments.first()?.as_str() {
            "crate" => self.segments.get(1).map(String::as_str),
            "self" => self.module.first().map(String::as_str),
            "super" => {
                let ups = self.segments.iter().take_while(|s| *s == "super").count();
                if ups < self.module.len() {
                    self.module.first().map(String::as_str)
                } else {
                    self.segments.get(ups).map(String::as_str)
                }
            }
            _ => None,
        }
    }

    pub fn location(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// Every path of the crate whose root file is `root_file` (`src/lib.rs`), `workspace` being
/// the directory file names are shown relative to.
pub fn crate_references(workspace: &Path, root_file: &Path) -> Vec<Reference> {
    let mut out = Vec::new();
    let root_dir = root_file.parent().expect("a root file has a directory").to_path_buf();
    let mut pending = vec![(root_file.to_path_buf(), Vec::new(), false, root_dir)];
    while let Some((file, module, test, children_dir)) = pending.pop() {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", file.display()));
        let shown = file.strip_prefix(workspace).unwrap_or(&file).display().to_string();
        let mut visitor = FileVisitor {
            file: shown,
            module,
            test,
            children_dir,
            out: &mut out,
            declared: &mut pending,
        };
        visitor.visit_file(&parsed);
    }
    out
}

/// The references of one piece of source, as if it were the file of `module` (for the tests of
/// this scanner); `mod x;` declarations in it are not followed.
pub fn source_references(source: &str, module: &[&str]) -> Vec<Reference> {
    let parsed = syn::parse_file(source).expect("test source parses");
    let mut out = Vec::new();
    let mut ignored = Vec::new();
    FileVisitor {
        file: "<source>".into(),
        module: module.iter().map(|m| m.to_string()).collect(),
        test: false,
        children_dir: PathBuf::new(),
        out: &mut out,
        declared: &mut ignored,
    }
    .visit_file(&parsed);
    out
}

/// (file, module path, under `cfg(test)`, directory of its child modules' files).
type Declared = (PathBuf, Vec<String>, bool, PathBuf);

struct FileVisitor<'a> {
    file: String,
    module: Vec<String>,
    test: bool,
    children_dir: PathBuf,
    out: &'a mut Vec<Reference>,
    declared: &'a mut Vec<Declared>,
}

impl FileVisitor<'_> {
    fn record(&mut self, segments: Vec<String>, line: usize) {
        self.out.push(Reference {
            module: self.module.clone(),
            segments,
            file: self.file.clone(),
            line,
            test: self.test,
        });
    }

    /// Paths inside token streams syn leaves unparsed (macro calls, attribute arguments):
    /// `a::b::c` runs of identifiers, and string literals that hold a `crate::` path (serde's
    /// `with = "crate::..."`). `$crate` (a macro's own crate) is not a path of this module.
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(group) => self.scan_tokens(group.stream()),
                TokenTree::Literal(literal) => {
                    let text = literal.to_string();
                    if let Some(path) = text.strip_prefix("\"crate::").and_then(|t| t.strip_suffix('"')) {
                        let mut segments = vec!["crate".to_owned()];
                        segments.extend(path.split("::").map(str::to_owned));
                        self.record(segments, literal.span().start().line);
                    }
                }
                TokenTree::Ident(ident) => {
                    let after_dollar = i > 0 && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == '$');
                    let mut segments = vec![ident.to_string()];
                    let mut j = i + 1;
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(TokenTree::Ident(next))) =
                        (tokens.get(j), tokens.get(j + 1), tokens.get(j + 2))
                    {
                        if a.as_char() != ':' || a.spacing() != Spacing::Joint || b.as_char() != ':' {
                            break;
                        }
                        segments.push(next.to_string());
                        j += 3;
                    }
                    if segments.len() > 1 && !after_dollar {
                        self.record(segments, ident.span().start().line);
                    }
                    i = j;
                    continue;
                }
                TokenTree::Punct(_) => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for FileVisitor<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let outer = self.test;
        self.test |= item_attrs(item).iter().any(is_cfg_test);
        visit::visit_item(self, item);
        self.test = outer;
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        let name = item.ident.to_string();
        let children_dir = self.children_dir.join(&name);
        let mut module = self.module.clone();
        module.push(name.clone());
        if let Some((_, items)) = &item.content {
            let (outer_module, outer_dir) = (
                std::mem::replace(&mut self.module, module),
                std::mem::replace(&mut self.children_dir, children_dir),
            );
            for item in items {
                self.visit_item(item);
            }
            self.module = outer_module;
            self.children_dir = outer_dir;
            return;
        }
        assert!(
            !item.attrs.iter().any(|a| a.path().is_ident("path")),
            "{}: `#[path]` on `mod {name}` is not followed by the layering check",
            self.file
        );
        let flat = self.children_dir.join(format!("{name}.rs"));
        let file = if flat.exists() {
            flat
        } else {
            children_dir.join("mod.rs")
        };
        self.declared.push((file, module, self.test, children_dir));
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let line = item.use_token.span.start().line;
        let mut paths = Vec::new();
        flatten_use(&item.tree, &mut Vec::new(), &mut paths);
        for segments in paths {
            self.record(segments, line);
        }
        for attr in &item.attrs {
            self.visit_attribute(attr);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.segments.len() > 1 && path.leading_colon.is_none() {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.record(segments, path.segments[0].ident.span().start().line);
        }
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.scan_tokens(mac.tokens.clone());
        visit::visit_macro(self, mac);
    }

    fn visit_meta_list(&mut self, list: &'ast syn::MetaList) {
        self.scan_tokens(list.tokens.clone());
        visit::visit_meta_list(self, list);
    }
}

/// `use a::{b, c::{d as e, *}}` → `a::b`, `a::c::d`, `a::c::*`.
fn flatten_use(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            flatten_use(&path.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(name) => out.push(with(prefix, name.ident.to_string())),
        syn::UseTree::Rename(rename) => out.push(with(prefix, rename.ident.to_string())),
        syn::UseTree::Glob(_) => out.push(with(prefix, "*".to_owned())),
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                flatten_use(tree, prefix, out);
            }
        }
    }
}

fn with(prefix: &[String], last: String) -> Vec<String> {
    let mut path = prefix.to_vec();
    path.push(last);
    path
}

/// `#[cfg(test)]` or `#[cfg(all(test, ...))]`; not `#[cfg(not(test))]`.
fn is_cfg_test(attr: &syn::Attribute) -> bool {
    let syn::Meta::List(list) = &attr.meta else {
        return false;
    };
    let tokens = list.tokens.to_string();
    list.path.is_ident("cfg") && (tokens == "test" || (tokens.starts_with("all") && tokens.contains("test")))
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}
