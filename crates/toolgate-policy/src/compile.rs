//! Validation and compilation of a spec into a matcher built once.

use std::collections::HashMap;

use crate::fnmatch::Matcher;
use ipnet::IpNet;
use jiff::Timestamp;

use crate::cidr_table::CidrTable;
use crate::digest::PolicyVersion;
use crate::error::PolicyError;
use crate::flows::CompiledFlows;
use crate::load::validate_object_name;
use crate::model::{
    ApprovalSettings, Budgets, Enforcement, Grant, Mode, PolicySpec, RuleTiers, ToolEffect,
};
use crate::network::TargetArgs;

pub(crate) use crate::glob_index::OrderedGlobs;

/// Rule key that applies to every tool.
pub const ANY_TOOL: &str = "*";

/// One fnmatch glob (see [`crate::fnmatch`]); only the empty glob and a
/// pattern too large to compile are refused, since fnmatch gives every other
/// string a meaning.
/// Longest `maxRunSeconds` (one year): keeps `started_at + limit` far from
/// overflow in every store.
pub const MAX_RUN_SECONDS: u64 = 366 * 86_400;

pub(crate) fn compile_glob(field: &str, glob: &str) -> Result<Matcher, PolicyError> {
    let invalid = |message: String| PolicyError::InvalidGlob {
        field: field.into(),
        glob: glob.into(),
        message,
    };
    if glob.is_empty() {
        return Err(invalid("empty glob".into()));
    }
    Matcher::new(glob).map_err(|e| invalid(e.to_string()))
}

/// The tier a rule belongs to, in evaluation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tier {
    Deny,
    Allow,
    Escalate,
}

impl Tier {
    fn name(self) -> &'static str {
        match self {
            Self::Deny => "deny",
            Self::Allow => "allow",
            Self::Escalate => "escalate",
        }
    }
    fn globs(self, tiers: &RuleTiers) -> &[String] {
        match self {
            Self::Deny => &tiers.deny,
            Self::Allow => &tiers.allow,
            Self::Escalate => &tiers.escalate,
        }
    }
}

/// Which arguments form the text that rules match.
#[derive(Debug, Clone)]
pub(crate) enum MatchText {
    /// Values of these arguments, in order, joined by one space.
    Named(Vec<String>),
    /// The action, then every argument value in key order, joined by one space.
    ActionAndValues,
}

#[derive(Debug, Clone)]
pub(crate) struct CompiledTool {
    pub(crate) effect: ToolEffect,
    pub(crate) match_text: MatchText,
    /// Arguments normalized as paths before any rule sees them (see
    /// [`crate::paths`]).
    pub(crate) path_args: Vec<String>,
    /// Whether `hardline.paths` applies: a workspace tool, or one that
    /// declares `pathArgs`.
    pub(crate) hardline_paths: bool,
    /// Arguments naming network targets (see [`crate::network`]).
    pub(crate) targets: TargetArgs,
    /// deny(tool), deny(*), allow(tool), allow(*), escalate(tool), escalate(*).
    pub(crate) rules: OrderedGlobs,
    /// Tier of each rule, parallel to `rules`.
    pub(crate) tiers: Vec<Tier>,
}

#[derive(Debug, Clone)]
pub(crate) struct CompiledGrant {
    pub(crate) tool: String,
    pub(crate) globs: OrderedGlobs,
    pub(crate) subjects: Vec<String>,
    pub(crate) expires_at: Timestamp,
}

/// A validated profile compiled for evaluation. Cheap to share behind an
/// `Arc`; evaluation takes `&self` and never allocates a matcher.
#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    pub(crate) name: String,
    pub(crate) version: PolicyVersion,
    pub(crate) mode: Mode,
    pub(crate) aliases: HashMap<String, String>,
    pub(crate) tools: HashMap<String, CompiledTool>,
    pub(crate) hardline_commands: OrderedGlobs,
    pub(crate) hardline_paths: OrderedGlobs,
    pub(crate) hardline_cidrs: CidrTable,
    pub(crate) egress_hosts: OrderedGlobs,
    /// `egress.allowSchemes`, lowercase (`http` and `https` always pass).
    pub(crate) egress_schemes: Vec<String>,
    pub(crate) grants: Vec<CompiledGrant>,
    pub(crate) spec: PolicySpec,
    pub(crate) source_grants: Vec<Grant>,
    pub(crate) flows: Option<CompiledFlows>,
    /// `spec.audit`'s input recording, read once.
    pub(crate) input_recording: Option<crate::audit::InputRecording>,
}

impl CompiledPolicy {
    /// Validates `spec` (and standing `grants`) and compiles them. Every
    /// error names the offending field.
    pub fn compile(name: &str, spec: &PolicySpec, grants: &[Grant]) -> Result<Self, PolicyError> {
        validate_object_name("metadata.name", name)?;
        let aliases = compile_aliases(spec)?;
        let canonical = |t: &str| aliases.get(t).cloned().unwrap_or_else(|| t.to_owned());

        for (tool, effect) in &spec.effects {
            if tool.is_empty() || tool == ANY_TOOL {
                return Err(PolicyError::InvalidValue {
                    field: format!("spec.effects.{tool}"),
                    message: "effects must name a concrete tool".into(),
                });
            }
            for (name, args) in [
                ("matchArgs", &effect.match_args),
                ("pathArgs", &effect.path_args),
                ("urlArgs", &effect.url_args),
                ("hostArgs", &effect.host_args),
            ] {
                if let Some(args) = args
                    && (args.is_empty() || args.iter().any(String::is_empty))
                {
                    return Err(PolicyError::InvalidValue {
                        field: format!("spec.effects.{tool}.{name}"),
                        message: format!("{name} must list at least one non-empty argument name"),
                    });
                }
            }
            if let Some(digest) = &effect.definition_digest
                && !is_sha256_digest(digest)
            {
                return Err(PolicyError::InvalidValue {
                    field: format!("spec.effects.{tool}.definitionDigest"),
                    message: "must be `sha256:` followed by 64 lowercase hex digits".into(),
                });
            }
        }

        // Rule keys, normalized through aliases.
        let mut rules_by_tool: HashMap<String, (&str, &RuleTiers)> = HashMap::new();
        for (key, tiers) in &spec.rules {
            if key == ANY_TOOL {
                continue;
            }
            let tool = canonical(key);
            if !spec.effects.contains_key(&tool) {
                return Err(PolicyError::IncompleteEffects {
                    field: format!("spec.rules.{key}"),
                    tool,
                });
            }
            if let Some((other, _)) = rules_by_tool.insert(tool.clone(), (key, tiers)) {
                return Err(PolicyError::InvalidAlias {
                    field: format!("spec.rules.{key}"),
                    message: format!("`{key}` and `{other}` both name tool `{tool}`"),
                });
            }
        }
        let any_rules = spec.rules.get(ANY_TOOL);

        let mut tools = HashMap::with_capacity(spec.effects.len());
        for (tool, effect) in &spec.effects {
            let own = rules_by_tool.get(tool.as_str());
            let mut entries = Vec::new();
            let mut tiers = Vec::new();
            for tier in [Tier::Deny, Tier::Allow, Tier::Escalate] {
                let sources = [
                    own.map(|(k, t)| (*k, tool.as_str(), *t)),
                    any_rules.map(|t| (ANY_TOOL, ANY_TOOL, t)),
                ];
                for (key, label_tool, rule_tiers) in sources.into_iter().flatten() {
                    for (i, glob) in tier.globs(rule_tiers).iter().enumerate() {
                        entries.push((
                            format!("spec.rules.{key}.{}[{i}]", tier.name()),
                            glob.clone(),
                            format!("{}:{label_tool}:{glob}", tier.name()),
                        ));
                        tiers.push(tier);
                    }
                }
            }
            tools.insert(
                tool.clone(),
                CompiledTool {
                    effect: effect.clone(),
                    match_text: default_match_text(tool, effect),
                    path_args: path_args(tool, effect),
                    hardline_paths: effect.side_effect.is_workspace() || effect.path_args.is_some(),
                    targets: TargetArgs::new(
                        effect.side_effect.is_network(),
                        effect.url_args.as_deref().unwrap_or_default(),
                        effect.host_args.as_deref().unwrap_or_default(),
                    ),
                    rules: OrderedGlobs::build(entries)?,
                    tiers,
                },
            );
        }
        // "*" globs must compile even when no tool is declared.
        if let Some(any) = any_rules {
            for tier in [Tier::Deny, Tier::Allow, Tier::Escalate] {
                for (i, glob) in tier.globs(any).iter().enumerate() {
                    compile_glob(&format!("spec.rules.*.{}[{i}]", tier.name()), glob)?;
                }
            }
        }

        let input_recording = crate::audit::input_recording(spec.audit.as_ref())?;
        let hardline = spec.hardline.clone().unwrap_or_default();
        for (i, glob) in hardline.paths.iter().enumerate() {
            check_path_glob(&format!("spec.hardline.paths[{i}]"), glob)?;
        }
        let hardline_commands = OrderedGlobs::build(labelled(
            "spec.hardline.commands",
            &hardline.commands,
            "hardline:commands",
        ))?;
        let hardline_paths = OrderedGlobs::build(labelled(
            "spec.hardline.paths",
            &hardline.paths,
            "hardline:paths",
        ))?;
        let mut hardline_cidrs = Vec::with_capacity(hardline.cidrs.len());
        for (i, text) in hardline.cidrs.iter().enumerate() {
            let net = parse_cidr(text).ok_or_else(|| PolicyError::InvalidCidr {
                field: format!("spec.hardline.cidrs[{i}]"),
                value: text.clone(),
            })?;
            hardline_cidrs.push((net, format!("hardline:cidrs:{text}")));
        }

        let hosts: Vec<String> = spec
            .egress
            .as_ref()
            .map(|e| e.allow_hosts.iter().map(|h| h.to_lowercase()).collect())
            .unwrap_or_default();
        let egress_hosts = OrderedGlobs::build(labelled(
            "spec.egress.allowHosts",
            &hosts,
            "egress:allowHosts",
        ))?;

        if let Some(ApprovalSettings { ttl_seconds: 0, .. }) = &spec.approvals {
            return Err(PolicyError::InvalidValue {
                field: "spec.approvals.ttlSeconds".into(),
                message: "ttlSeconds must be at least 1".into(),
            });
        }
        if let Some(approvals) = &spec.approvals {
            crate::notify::check_channels("spec.approvals.notify", &approvals.notify)?;
        }

        if let Some(budgets) = &spec.budgets {
            for (field, value) in [
                ("maxCallsPerRun", budgets.max_calls_per_run),
                ("maxRunSeconds", budgets.max_run_seconds),
                ("perPod.maxCalls", budgets.per_pod.and_then(|p| p.max_calls)),
            ] {
                if value == Some(0) {
                    return Err(PolicyError::InvalidValue {
                        field: format!("spec.budgets.{field}"),
                        message: format!("{field} must be at least 1 (omit it for no limit)"),
                    });
                }
            }
            if budgets.max_run_seconds.is_some_and(|s| s > MAX_RUN_SECONDS) {
                return Err(PolicyError::InvalidValue {
                    field: "spec.budgets.maxRunSeconds".into(),
                    message: format!("maxRunSeconds must be at most {MAX_RUN_SECONDS}"),
                });
            }
        }

        let mut compiled_grants = Vec::with_capacity(grants.len());
        for (i, grant) in grants.iter().enumerate() {
            compiled_grants.push(compile_grant(i, grant, spec, &canonical)?);
        }

        let flows = spec
            .flows
            .as_ref()
            .map(|f| CompiledFlows::compile(f, &aliases))
            .transpose()?;

        Ok(Self {
            name: name.to_owned(),
            version: PolicyVersion::compute(name, spec, grants),
            mode: spec.mode,
            aliases,
            tools,
            hardline_commands,
            hardline_paths,
            hardline_cidrs: CidrTable::new(hardline_cidrs),
            egress_hosts,
            egress_schemes: crate::network::compile_schemes(spec.egress.as_ref())?,
            grants: compiled_grants,
            spec: spec.clone(),
            source_grants: grants.to_vec(),
            flows,
            input_recording,
        })
    }

    /// The enforcement mode of `tool` (an alias resolves to its tool): its
    /// own `enforcement`, else the profile's, else `enforce`.
    pub fn enforcement(&self, tool: &str) -> Enforcement {
        self.effect(tool)
            .and_then(|e| e.enforcement)
            .or(self.spec.enforcement)
            .unwrap_or_default()
    }

    /// The profile's run budgets (all unlimited when none are set).
    pub fn budgets(&self) -> Budgets {
        self.spec.budgets.clone().unwrap_or_default()
    }

    /// True when any tool (or the profile) runs in `warn` or `dryRun`.
    pub fn reports_only_somewhere(&self) -> bool {
        self.spec.enforcement.unwrap_or_default() != Enforcement::Enforce
            || self
                .spec
                .effects
                .values()
                .any(|e| e.enforcement.is_some_and(|m| m != Enforcement::Enforce))
    }

    /// The profile name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `{name}@{sha12}+h{sha8}` and the full hashes.
    pub fn version(&self) -> &PolicyVersion {
        &self.version
    }

    /// The spec this policy was compiled from.
    pub fn spec(&self) -> &PolicySpec {
        &self.spec
    }

    /// The standing grants compiled into this policy.
    pub fn grants(&self) -> &[Grant] {
        &self.source_grants
    }

    /// Number of rule globs across all tiers and tools (after `"*"` expansion).
    pub fn rule_count(&self) -> usize {
        self.tools.values().map(|t| t.rules.len()).sum()
    }

    /// Canonical name of `tool` after alias resolution.
    pub fn canonical_tool<'a>(&'a self, tool: &'a str) -> &'a str {
        self.aliases.get(tool).map(String::as_str).unwrap_or(tool)
    }

    /// The declared effect of a tool (after alias resolution).
    pub fn effect(&self, tool: &str) -> Option<&ToolEffect> {
        self.tools.get(self.canonical_tool(tool)).map(|t| &t.effect)
    }

    /// The reviewed definition digest `tool` is pinned to, if any (see
    /// [`ToolEffect::definition_digest`]).
    pub fn pinned_definition(&self, tool: &str) -> Option<&str> {
        self.effect(tool)?.definition_digest.as_deref()
    }

    /// Whether some call of `tool` could be allowed or escalated: the tool
    /// is declared and the mode is `allowAll`, or (`rules` mode) it has an
    /// allow or escalate rule, its own or `"*"` (standing grants only turn
    /// escalations into allows, so they add nothing here). A tool this says
    /// no to is denied whatever its arguments, so a gateway need not offer it
    /// to the agent. Hardlines are not considered: they depend on the
    /// arguments.
    pub fn may_permit(&self, tool: &str) -> bool {
        let name = self.canonical_tool(tool);
        let Some(compiled) = self.tools.get(name) else {
            return false;
        };
        match self.mode {
            Mode::AllowAll => true,
            Mode::DenyAll => false,
            Mode::Rules => compiled.tiers.iter().any(|t| *t != Tier::Deny),
        }
    }
}

fn labelled(field: &str, globs: &[String], prefix: &str) -> Vec<(String, String, String)> {
    globs
        .iter()
        .enumerate()
        .map(|(i, g)| (format!("{field}[{i}]"), g.clone(), format!("{prefix}:{g}")))
        .collect()
}

fn compile_aliases(spec: &PolicySpec) -> Result<HashMap<String, String>, PolicyError> {
    let mut aliases = HashMap::with_capacity(spec.aliases.len());
    for (alias, target) in &spec.aliases {
        let field = format!("spec.aliases.{alias}");
        if alias.is_empty() || alias == ANY_TOOL || alias == target {
            return Err(PolicyError::InvalidAlias {
                field,
                message: format!("alias `{alias}` -> `{target}` is not a rename"),
            });
        }
        if spec.effects.contains_key(alias) {
            return Err(PolicyError::InvalidAlias {
                field,
                message: format!("`{alias}` is both an alias and a tool in spec.effects"),
            });
        }
        if spec.aliases.contains_key(target) {
            return Err(PolicyError::InvalidAlias {
                field,
                message: format!(
                    "`{target}` is itself an alias; aliases must name canonical tools"
                ),
            });
        }
        if !spec.effects.contains_key(target) {
            return Err(PolicyError::IncompleteEffects {
                field,
                tool: target.clone(),
            });
        }
        aliases.insert(alias.clone(), target.clone());
    }
    Ok(aliases)
}

/// `sha256:` and 64 lowercase hex digits.
pub(crate) fn is_sha256_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn default_match_text(tool: &str, effect: &ToolEffect) -> MatchText {
    if let Some(args) = &effect.match_args {
        return MatchText::Named(args.clone());
    }
    let named = |names: &[&str]| MatchText::Named(names.iter().map(|s| (*s).to_owned()).collect());
    match tool {
        "bash" => named(&["command"]),
        "editor" => named(&["file_path"]),
        "reader" => named(&["path"]),
        "search" => named(&["pattern", "path"]),
        // The sidecar's own workspace API (see docs/sidecar.md: the workspace API is a tool like any other).
        "workspace.read" | "workspace.write" | "workspace.list" | "workspace.stat" => {
            named(&["path"])
        }
        _ => MatchText::ActionAndValues,
    }
}

/// Tools whose `path` and `file_path` arguments are paths without saying so.
const PATH_TOOLS: [&str; 7] = [
    "reader",
    "editor",
    "search",
    "workspace.read",
    "workspace.write",
    "workspace.list",
    "workspace.stat",
];

/// The arguments of `tool` that are paths: its `pathArgs`, plus `path` and
/// `file_path` for a workspace tool or one of [`PATH_TOOLS`].
fn path_args(tool: &str, effect: &ToolEffect) -> Vec<String> {
    let mut names: Vec<String> = effect.path_args.clone().unwrap_or_default();
    if effect.side_effect.is_workspace() || PATH_TOOLS.contains(&tool) {
        for builtin in ["path", "file_path"] {
            if !names.iter().any(|n| n == builtin) {
                names.push(builtin.to_owned());
            }
        }
    }
    names
}

/// Refuses a hardline path glob that no normalized path can match (a
/// trailing `/`, `//`, or a `.` or `..` segment): it would protect nothing.
fn check_path_glob(field: &str, glob: &str) -> Result<(), PolicyError> {
    let body = glob.strip_prefix('/').unwrap_or(glob);
    let never = (glob.len() > 1 && glob.ends_with('/'))
        || body
            .split('/')
            .enumerate()
            .any(|(i, s)| s == ".." || (s == "." && glob != ".") || (s.is_empty() && i > 0));
    if never {
        return Err(PolicyError::InvalidGlob {
            field: field.into(),
            glob: glob.into(),
            message: "paths are matched in normal form (no repeated or trailing `/`, no `.` or \
                      `..` segments), so this glob would never match"
                .into(),
        });
    }
    Ok(())
}

/// A literal network (`10.0.0.0/8`) or address (`10.1.2.3`, as a /32).
fn parse_cidr(text: &str) -> Option<IpNet> {
    text.parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<std::net::IpAddr>().ok().map(IpNet::from))
        .map(|n| n.trunc())
}

fn compile_grant(
    index: usize,
    grant: &Grant,
    spec: &PolicySpec,
    canonical: &dyn Fn(&str) -> String,
) -> Result<CompiledGrant, PolicyError> {
    let field = format!("grants[{index}]");
    let tool = canonical(&grant.tool);
    if !spec.effects.contains_key(&tool) {
        return Err(PolicyError::IncompleteEffects {
            field: format!("{field}.tool"),
            tool,
        });
    }
    if grant.subjects.is_empty() || grant.subjects.iter().any(String::is_empty) {
        return Err(PolicyError::InvalidValue {
            field: format!("{field}.subjects"),
            message: "a grant must name at least one subject (or \"*\")".into(),
        });
    }
    let expires_at: Timestamp =
        grant
            .expires_at
            .parse()
            .map_err(|e| PolicyError::InvalidValue {
                field: format!("{field}.expiresAt"),
                message: format!("`{}` is not an RFC 3339 timestamp: {e}", grant.expires_at),
            })?;
    let globs = OrderedGlobs::build(vec![(
        format!("{field}.glob"),
        grant.glob.clone(),
        format!("grant:{tool}:{}", grant.glob),
    )])?;
    Ok(CompiledGrant {
        tool,
        globs,
        subjects: grant.subjects.clone(),
        expires_at,
    })
}
