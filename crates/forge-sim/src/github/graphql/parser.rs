//! A small GraphQL document parser: operations, selection sets, arguments, variables, fragments.
//!
//! This is deliberately not a full GraphQL engine: it parses the executable subset clients send
//! (queries and mutations with aliases, arguments, variables, fragments and `@include`/`@skip`)
//! so the simulator can resolve the fields it knows and report the rest as GraphQL errors.

use std::collections::BTreeMap;

/// A parse failure, reported to the client as a GraphQL `errors` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub message: String,
    pub line: usize,
    pub column: usize,
}

/// An input value as written in the document.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Variable(String),
    Int(i64),
    Float(f64),
    String(String),
    Boolean(bool),
    Null,
    Enum(String),
    List(Vec<Value>),
    Object(Vec<(String, Value)>),
}

impl Value {
    /// Resolves variables against the request's `variables` and converts to JSON.
    pub fn to_json(&self, vars: &serde_json::Map<String, serde_json::Value>) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Variable(name) => vars.get(name).cloned().unwrap_or(J::Null),
            Value::Int(i) => J::from(*i),
            Value::Float(f) => J::from(*f),
            Value::String(s) => J::String(s.clone()),
            Value::Boolean(b) => J::Bool(*b),
            Value::Null => J::Null,
            Value::Enum(e) => J::String(e.clone()),
            Value::List(items) => J::Array(items.iter().map(|v| v.to_json(vars)).collect()),
            Value::Object(fields) => J::Object(
                fields
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json(vars)))
                    .collect(),
            ),
        }
    }
}

/// A directive such as `@include(if: $x)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Directive {
    pub name: String,
    pub args: Vec<(String, Value)>,
}

/// One field in a selection set.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub alias: Option<String>,
    pub name: String,
    pub args: Vec<(String, Value)>,
    pub directives: Vec<Directive>,
    pub selection: Vec<Selection>,
    pub line: usize,
    pub column: usize,
}

impl Field {
    /// The key under which the field's value appears in the response.
    pub fn response_key(&self) -> &str {
        self.alias.as_deref().unwrap_or(&self.name)
    }

    /// An argument by name.
    pub fn arg(&self, name: &str) -> Option<&Value> {
        self.args.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
}

/// A selection: a field, a named fragment spread or an inline fragment.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    Field(Field),
    FragmentSpread {
        name: String,
        directives: Vec<Directive>,
    },
    InlineFragment {
        type_condition: Option<String>,
        directives: Vec<Directive>,
        selection: Vec<Selection>,
    },
}

/// The kind of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationKind {
    Query,
    Mutation,
    Subscription,
}

/// A variable definition with its optional default.
#[derive(Debug, Clone, PartialEq)]
pub struct VariableDefinition {
    pub name: String,
    pub default: Option<Value>,
}

/// An executable operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    pub kind: OperationKind,
    pub name: Option<String>,
    pub variables: Vec<VariableDefinition>,
    pub selection: Vec<Selection>,
}

/// A named fragment definition.
#[derive(Debug, Clone, PartialEq)]
pub struct Fragment {
    pub type_condition: String,
    pub selection: Vec<Selection>,
}

/// A parsed document.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Document {
    pub operations: Vec<Operation>,
    pub fragments: BTreeMap<String, Fragment>,
}

impl Document {
    /// Picks the operation to execute, as the GraphQL spec describes.
    pub fn operation(&self, name: Option<&str>) -> Result<&Operation, String> {
        match name {
            Some(n) => self
                .operations
                .iter()
                .find(|o| o.name.as_deref() == Some(n))
                .ok_or_else(|| format!("Unknown operation named \"{n}\".")),
            None => match self.operations.as_slice() {
                [one] => Ok(one),
                [] => Err("No operations in query document.".to_string()),
                _ => Err(
                    "An operation name is required when the document contains multiple operations."
                        .to_string(),
                ),
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Punct(char),
    Spread,
    Name(String),
    Int(i64),
    Float(f64),
    Str(String),
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
    column: usize,
}

impl<'a> Lexer<'a> {
    fn new(src: &'a str) -> Self {
        Self {
            chars: src.chars().peekable(),
            line: 1,
            column: 1,
        }
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
            self.column = 1;
        } else {
            self.column += 1;
        }
        Some(c)
    }

    fn err(&self, message: impl Into<String>) -> ParseError {
        ParseError {
            message: message.into(),
            line: self.line,
            column: self.column,
        }
    }

    fn tokens(mut self) -> Result<Vec<(Tok, usize, usize)>, ParseError> {
        let mut out = Vec::new();
        loop {
            // Skip ignored tokens: whitespace, commas, comments, BOM.
            while let Some(&c) = self.chars.peek() {
                if c.is_whitespace() || c == ',' || c == '\u{feff}' {
                    self.bump();
                } else if c == '#' {
                    while let Some(&c) = self.chars.peek() {
                        if c == '\n' {
                            break;
                        }
                        self.bump();
                    }
                } else {
                    break;
                }
            }
            let (line, column) = (self.line, self.column);
            let Some(&c) = self.chars.peek() else {
                return Ok(out);
            };
            let tok = match c {
                '!' | '$' | '(' | ')' | ':' | '=' | '@' | '[' | ']' | '{' | '}' | '|' | '&' => {
                    self.bump();
                    Tok::Punct(c)
                }
                '.' => {
                    for _ in 0..3 {
                        if self.bump() != Some('.') {
                            return Err(self.err("Expected \"...\""));
                        }
                    }
                    Tok::Spread
                }
                '"' => Tok::Str(self.string()?),
                c if c == '_' || c.is_ascii_alphabetic() => {
                    let mut s = String::new();
                    while let Some(&c) = self.chars.peek() {
                        if c == '_' || c.is_ascii_alphanumeric() {
                            s.push(c);
                            self.bump();
                        } else {
                            break;
                        }
                    }
                    Tok::Name(s)
                }
                c if c == '-' || c.is_ascii_digit() => self.number()?,
                other => return Err(self.err(format!("Unexpected character \"{other}\""))),
            };
            out.push((tok, line, column));
        }
    }

    fn number(&mut self) -> Result<Tok, ParseError> {
        let mut s = String::new();
        let mut float = false;
        while let Some(&c) = self.chars.peek() {
            if c.is_ascii_digit() || c == '-' || c == '+' {
                s.push(c);
            } else if c == '.' || c == 'e' || c == 'E' {
                float = true;
                s.push(c);
            } else {
                break;
            }
            self.bump();
        }
        if float {
            s.parse::<f64>()
                .map(Tok::Float)
                .map_err(|_| self.err(format!("Invalid number \"{s}\"")))
        } else {
            s.parse::<i64>()
                .map(Tok::Int)
                .map_err(|_| self.err(format!("Invalid number \"{s}\"")))
        }
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.bump(); // opening quote
        // Block string?
        if self.chars.peek() == Some(&'"') {
            self.bump();
            if self.chars.peek() == Some(&'"') {
                self.bump();
                let mut s = String::new();
                loop {
                    match self.bump() {
                        None => return Err(self.err("Unterminated string")),
                        Some('"') if self.chars.peek() == Some(&'"') => {
                            self.bump();
                            if self.chars.peek() == Some(&'"') {
                                self.bump();
                                return Ok(s.trim().to_string());
                            }
                            s.push_str("\"\"");
                        }
                        Some(c) => s.push(c),
                    }
                }
            }
            return Ok(String::new());
        }
        let mut s = String::new();
        loop {
            match self.bump() {
                None | Some('\n') => return Err(self.err("Unterminated string")),
                Some('"') => return Ok(s),
                Some('\\') => match self.bump() {
                    Some('n') => s.push('\n'),
                    Some('t') => s.push('\t'),
                    Some('r') => s.push('\r'),
                    Some('b') => s.push('\u{8}'),
                    Some('f') => s.push('\u{c}'),
                    Some('u') => {
                        let hex: String = (0..4).filter_map(|_| self.bump()).collect();
                        let code = u32::from_str_radix(&hex, 16)
                            .ok()
                            .and_then(char::from_u32)
                            .ok_or_else(|| self.err("Invalid unicode escape"))?;
                        s.push(code);
                    }
                    Some(c) => s.push(c),
                    None => return Err(self.err("Unterminated string")),
                },
                Some(c) => s.push(c),
            }
        }
    }
}

struct Parser {
    toks: Vec<(Tok, usize, usize)>,
    pos: usize,
    /// Nesting depth of selection sets and input values (bounded to keep recursion shallow).
    depth: usize,
}

/// The deepest nesting of selection sets / input values accepted.
pub const MAX_DEPTH: usize = 40;

/// Parses a GraphQL executable document.
pub fn parse(src: &str) -> Result<Document, ParseError> {
    let toks = Lexer::new(src).tokens()?;
    let mut p = Parser {
        toks,
        pos: 0,
        depth: 0,
    };
    let mut doc = Document::default();
    while p.peek().is_some() {
        match p.peek() {
            Some(Tok::Punct('{')) => {
                let selection = p.selection_set()?;
                doc.operations.push(Operation {
                    kind: OperationKind::Query,
                    name: None,
                    variables: Vec::new(),
                    selection,
                });
            }
            Some(Tok::Name(n)) if n == "fragment" => {
                p.advance();
                let name = p.name()?;
                p.expect_keyword("on")?;
                let type_condition = p.name()?;
                p.directives()?;
                let selection = p.selection_set()?;
                doc.fragments.insert(
                    name,
                    Fragment {
                        type_condition,
                        selection,
                    },
                );
            }
            Some(Tok::Name(n)) if n == "query" || n == "mutation" || n == "subscription" => {
                let kind = match n.as_str() {
                    "query" => OperationKind::Query,
                    "mutation" => OperationKind::Mutation,
                    _ => OperationKind::Subscription,
                };
                p.advance();
                let name = match p.peek() {
                    Some(Tok::Name(_)) => Some(p.name()?),
                    _ => None,
                };
                let variables = p.variable_definitions()?;
                p.directives()?;
                let selection = p.selection_set()?;
                doc.operations.push(Operation {
                    kind,
                    name,
                    variables,
                    selection,
                });
            }
            _ => return Err(p.unexpected()),
        }
    }
    if doc.operations.is_empty() {
        return Err(ParseError {
            message: "No operations in query document.".into(),
            line: 1,
            column: 1,
        });
    }
    Ok(doc)
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(t, _, _)| t)
    }

    fn loc(&self) -> (usize, usize) {
        self.toks
            .get(self.pos)
            .or_else(|| self.toks.last())
            .map(|(_, l, c)| (*l, *c))
            .unwrap_or((1, 1))
    }

    fn advance(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).map(|(t, _, _)| t.clone());
        self.pos += 1;
        t
    }

    fn unexpected(&self) -> ParseError {
        let (line, column) = self.loc();
        let message = match self.peek() {
            None => "Unexpected end of document".to_string(),
            Some(Tok::Punct(c)) => format!("Parse error on \"{c}\" ({c})"),
            Some(Tok::Spread) => "Parse error on \"...\"".to_string(),
            Some(Tok::Name(n)) => format!("Parse error on \"{n}\" (IDENTIFIER)"),
            Some(Tok::Int(i)) => format!("Parse error on \"{i}\" (INT)"),
            Some(Tok::Float(f)) => format!("Parse error on \"{f}\" (FLOAT)"),
            Some(Tok::Str(s)) => format!("Parse error on \"{s}\" (STRING)"),
        };
        ParseError {
            message,
            line,
            column,
        }
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(&Tok::Punct(c)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Result<(), ParseError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.unexpected())
        }
    }

    fn name(&mut self) -> Result<String, ParseError> {
        match self.peek() {
            Some(Tok::Name(n)) => {
                let n = n.clone();
                self.pos += 1;
                Ok(n)
            }
            _ => Err(self.unexpected()),
        }
    }

    fn expect_keyword(&mut self, kw: &str) -> Result<(), ParseError> {
        match self.peek() {
            Some(Tok::Name(n)) if n == kw => {
                self.pos += 1;
                Ok(())
            }
            _ => Err(self.unexpected()),
        }
    }

    fn variable_definitions(&mut self) -> Result<Vec<VariableDefinition>, ParseError> {
        let mut out = Vec::new();
        if !self.eat('(') {
            return Ok(out);
        }
        while !self.eat(')') {
            self.expect('$')?;
            let name = self.name()?;
            self.expect(':')?;
            self.type_ref()?;
            let default = if self.eat('=') {
                Some(self.value(true)?)
            } else {
                None
            };
            self.directives()?;
            out.push(VariableDefinition { name, default });
        }
        Ok(out)
    }

    fn type_ref(&mut self) -> Result<(), ParseError> {
        if self.eat('[') {
            self.type_ref()?;
            self.expect(']')?;
        } else {
            self.name()?;
        }
        self.eat('!');
        Ok(())
    }

    fn directives(&mut self) -> Result<Vec<Directive>, ParseError> {
        let mut out = Vec::new();
        while self.eat('@') {
            let name = self.name()?;
            let args = self.arguments()?;
            out.push(Directive { name, args });
        }
        Ok(out)
    }

    fn arguments(&mut self) -> Result<Vec<(String, Value)>, ParseError> {
        let mut out = Vec::new();
        if !self.eat('(') {
            return Ok(out);
        }
        while !self.eat(')') {
            let name = self.name()?;
            self.expect(':')?;
            out.push((name, self.value(false)?));
        }
        Ok(out)
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            let (line, column) = self.loc();
            return Err(ParseError {
                message: format!(
                    "Query has depth of more than {MAX_DEPTH}, which exceeds max depth"
                ),
                line,
                column,
            });
        }
        Ok(())
    }

    fn value(&mut self, constant: bool) -> Result<Value, ParseError> {
        self.enter()?;
        let v = self.value_inner(constant);
        self.depth -= 1;
        v
    }

    fn value_inner(&mut self, constant: bool) -> Result<Value, ParseError> {
        match self.advance() {
            Some(Tok::Punct('$')) if !constant => Ok(Value::Variable(self.name()?)),
            Some(Tok::Int(i)) => Ok(Value::Int(i)),
            Some(Tok::Float(f)) => Ok(Value::Float(f)),
            Some(Tok::Str(s)) => Ok(Value::String(s)),
            Some(Tok::Name(n)) => Ok(match n.as_str() {
                "true" => Value::Boolean(true),
                "false" => Value::Boolean(false),
                "null" => Value::Null,
                _ => Value::Enum(n),
            }),
            Some(Tok::Punct('[')) => {
                let mut items = Vec::new();
                while !self.eat(']') {
                    items.push(self.value(constant)?);
                }
                Ok(Value::List(items))
            }
            Some(Tok::Punct('{')) => {
                let mut fields = Vec::new();
                while !self.eat('}') {
                    let name = self.name()?;
                    self.expect(':')?;
                    fields.push((name, self.value(constant)?));
                }
                Ok(Value::Object(fields))
            }
            _ => {
                self.pos = self.pos.saturating_sub(1);
                Err(self.unexpected())
            }
        }
    }

    fn selection_set(&mut self) -> Result<Vec<Selection>, ParseError> {
        self.enter()?;
        let set = self.selection_set_inner();
        self.depth -= 1;
        set
    }

    fn selection_set_inner(&mut self) -> Result<Vec<Selection>, ParseError> {
        self.expect('{')?;
        let mut out = Vec::new();
        while !self.eat('}') {
            if self.peek().is_none() {
                return Err(self.unexpected());
            }
            out.push(self.selection()?);
        }
        if out.is_empty() {
            return Err(self.unexpected());
        }
        Ok(out)
    }

    fn selection(&mut self) -> Result<Selection, ParseError> {
        if self.peek() == Some(&Tok::Spread) {
            self.advance();
            return match self.peek() {
                Some(Tok::Name(n)) if n == "on" => {
                    self.advance();
                    let type_condition = Some(self.name()?);
                    let directives = self.directives()?;
                    let selection = self.selection_set()?;
                    Ok(Selection::InlineFragment {
                        type_condition,
                        directives,
                        selection,
                    })
                }
                Some(Tok::Name(_)) => {
                    let name = self.name()?;
                    let directives = self.directives()?;
                    Ok(Selection::FragmentSpread { name, directives })
                }
                _ => {
                    let directives = self.directives()?;
                    let selection = self.selection_set()?;
                    Ok(Selection::InlineFragment {
                        type_condition: None,
                        directives,
                        selection,
                    })
                }
            };
        }
        let (line, column) = self.loc();
        let first = self.name()?;
        let (alias, name) = if self.eat(':') {
            (Some(first), self.name()?)
        } else {
            (None, first)
        };
        let args = self.arguments()?;
        let directives = self.directives()?;
        let selection = if self.peek() == Some(&Tok::Punct('{')) {
            self.selection_set()?
        } else {
            Vec::new()
        };
        Ok(Selection::Field(Field {
            alias,
            name,
            args,
            directives,
            selection,
            line,
            column,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_batched_aliases_and_nested_selections() {
        let doc = parse(
            r#"query Q($owner: String!, $n: Int = 2) {
              repository(owner: $owner, name: "r") {
                pr1: pullRequest(number: 1) { number mergeQueueEntry { state position } }
                pr2: pullRequest(number: $n) { ...F reviewThreads(first: 100) { nodes { isResolved } } }
              }
            }
            fragment F on PullRequest { headRefOid }"#,
        )
        .unwrap();
        let op = doc.operation(None).unwrap();
        assert_eq!(op.kind, OperationKind::Query);
        assert_eq!(op.variables.len(), 2);
        assert_eq!(op.variables[1].default, Some(Value::Int(2)));
        let Selection::Field(repo) = &op.selection[0] else {
            panic!("field expected")
        };
        assert_eq!(repo.name, "repository");
        assert_eq!(repo.arg("name"), Some(&Value::String("r".into())));
        let Selection::Field(pr2) = &repo.selection[1] else {
            panic!("field expected")
        };
        assert_eq!(pr2.response_key(), "pr2");
        assert_eq!(pr2.arg("number"), Some(&Value::Variable("n".into())));
        assert!(doc.fragments.contains_key("F"));
    }

    #[test]
    fn parses_mutation_with_object_input() {
        let doc = parse(
            r#"mutation { enqueuePullRequest(input: {pullRequestId: "PR_1", expectedHeadOid: "abc"}) { mergeQueueEntry { id state } } }"#,
        )
        .unwrap();
        let op = doc.operation(None).unwrap();
        assert_eq!(op.kind, OperationKind::Mutation);
        let Selection::Field(f) = &op.selection[0] else {
            panic!("field expected")
        };
        let input = f.arg("input").unwrap().to_json(&serde_json::Map::new());
        assert_eq!(input["pullRequestId"], "PR_1");
    }

    #[test]
    fn reports_errors_with_location() {
        let err = parse("query { repository(owner: ) }").unwrap_err();
        assert_eq!(err.line, 1);
        assert!(err.message.contains("Parse error"), "{}", err.message);
        assert!(parse("{ a ").is_err());
        assert!(parse("").is_err());
        assert!(parse("{ a(x: \"unterminated) }").is_err());
        let deep = format!("{}{}", "{ a ".repeat(500), "}".repeat(500));
        assert!(parse(&deep).unwrap_err().message.contains("depth"));
        let deep_value = format!("{{ a(x: {}1{}) }}", "[".repeat(500), "]".repeat(500));
        assert!(parse(&deep_value).is_err());
    }
}
