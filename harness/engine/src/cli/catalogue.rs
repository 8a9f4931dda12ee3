//! `crashpoint catalogue`: every mutant and the reference, explored under the same budget, and
//! tabled mutants first.

use std::fmt::Write;

use anyhow::{anyhow, bail, Result};

use std::path::PathBuf;
use std::time::Instant;

use crate::explore::{self, Options, Report, Shard};
use crate::report::model::{Budget, Outcome, ScenarioReport};
use crate::report::ReportDir;
use crate::scenario;
use crate::services::ServiceOptions;
use crate::workload::Registry;
use super::run::{add_timeline, new_report, with_services};

/// Arguments of `catalogue`.
#[derive(Debug, clap::Args)]
pub struct CatalogueArgs {
    /// The workload whose mutants run (every workload's when omitted), e.g. `payout`.
    pub workload: Option<String>,
    /// Schedules per system (each stops at its first failure). Default 300: payout's
    /// `check-then-insert` and `batch-entry-id-identity` need rare interleavings (found after
    /// 100 schedules with seed 1), and other seeds need more.
    #[arg(long, default_value_t = 300)]
    pub budget: u64,
    /// Run seed, the same for every system.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A detection rate instead of one seed's verdict: every mutant is explored once per seed
    /// (`1..10`, inclusive, or a list `1,3,7`), and the table gives, per mutant, the seeds
    /// that caught it and the median schedules to its first failure over them. The reference
    /// is explored on every seed too. Overrides `--seed`.
    #[arg(long, value_parser = parse_seeds, conflicts_with = "seed")]
    pub seeds: Option<Seeds>,
    /// The exploration scenario (default: the workload's catalogue scenario, e.g.
    /// `payout/catalogue`, whose events pay distinct payments so that each mutant is caught
    /// through its own failure window). Only with one workload.
    #[arg(long)]
    pub scenario: Option<String>,
    /// Where `junit.xml` (one test case per system), `report.json`, `summary.md` and the
    /// mutants' timelines go.
    #[arg(long, default_value = "reports/catalogue")]
    pub report_dir: PathBuf,
    /// Explorations run at once (see `run --jobs`): each mutant and each reference starts on
    /// one slot, and slots with nothing left to start help those still searching. Default:
    /// two per core. The table and reports do not depend on it, apart from wall times.
    #[arg(long, default_value_t = explore::default_jobs())]
    pub jobs: usize,
}

/// The seeds of `catalogue --seeds`, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seeds(pub Vec<u64>);

/// `A..B` (inclusive) or `A,B,C`: the seeds of `--seeds`.
fn parse_seeds(s: &str) -> std::result::Result<Seeds, String> {
    let bad = || format!("`{s}`: expected seeds as `1..10` (inclusive) or `1,3,7`");
    let seeds: Vec<u64> = match s.split_once("..") {
        Some((a, b)) => {
            let (a, b): (u64, u64) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
            if a > b || b - a >= 1000 {
                return Err(bad());
            }
            (a..=b).collect()
        }
        None => s.split(',').map(|x| x.trim().parse().map_err(|_| bad())).collect::<std::result::Result<_, _>>()?,
    };
    if seeds.is_empty() {
        return Err(bad());
    }
    Ok(Seeds(seeds))
}

/// Seeds as text, runs of consecutive ones joined (`1-4, 6, 8-10`), or `none`.
fn seed_ranges(seeds: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < seeds.len() {
        let mut j = i;
        while j + 1 < seeds.len() && seeds[j + 1] == seeds[j] + 1 {
            j += 1;
        }
        out.push(if i == j { seeds[i].to_string() } else { format!("{}-{}", seeds[i], seeds[j]) });
        i = j + 1;
    }
    if out.is_empty() { "none".into() } else { out.join(", ") }
}

fn row(name: &str, r: &Report) -> String {
    match &r.failure {
        Some(f) => {
            let why: Vec<&str> = f.minimal.verdicts.iter().filter(|v| !v.holds).map(|v| v.invariant.as_str()).collect();
            format!(
                "| {name} | yes | {} | {:.1} | {:.1} | {} | {} |",
                f.schedules_until,
                f.found_after.as_secs_f64(),
                r.stats.wall.as_secs_f64(),
                f.minimal.schedule.decisions.len(),
                why.join("; ")
            )
        }
        None => format!("| {name} | no | – | – | {:.1} | – | – |", r.stats.wall.as_secs_f64()),
    }
}

/// Explores every mutant of the catalogue and the reference (at once, on a job board) with the
/// same budget and seed, prints the detection table, and writes it as `catalogue.md` into
/// `--report-dir` beside the reports (where a mutant's test case passes when it is caught).
/// Exit 0 when every mutant was caught and the reference and every harmless variant passed
/// (a harmless variant caught is a false alarm), 1 otherwise.
pub fn catalogue(rt: &tokio::runtime::Runtime, opts: &ServiceOptions, args: &CatalogueArgs, registry: &Registry) -> Result<i32> {
    let workloads = match &args.workload {
        Some(w) => vec![registry
            .get(w)
            .ok_or_else(|| anyhow!("unknown workload `{w}`; expected one of {}", registry.names().join(", ")))?],
        None if args.scenario.is_some() => bail!("--scenario needs a workload: `crashpoint catalogue <workload> --scenario …`"),
        None => registry.all().to_vec(),
    };
    let all = scenario::discover(&scenario::scenarios_dir(), registry)?;
    let find = |w: &dyn crate::workload::Workload, name: String| {
        all.iter()
            .find(|s| s.name == name && s.explore.is_some() && s.workload.name() == w.name())
            .cloned()
            .ok_or_else(|| anyhow!("no exploration scenario `{name}` of workload `{}`", w.name()))
    };
    // Per workload: each mutant with the scenario it is explored on.
    let mut chosen: Vec<Vec<(&'static str, scenario::Scenario)>> = Vec::new();
    for w in &workloads {
        let mut plan = Vec::new();
        for m in w.systems().iter().map(|i| i.name).filter(|n| *n != "reference") {
            let name = args.scenario.clone().unwrap_or_else(|| w.catalogue_scenario_of(m));
            plan.push((m, find(w.as_ref(), name)?));
        }
        if plan.is_empty() {
            plan.push(("reference", find(w.as_ref(), args.scenario.clone().unwrap_or_else(|| w.catalogue_scenario()))?));
        }
        chosen.push(plan);
    }
    if let Some(seeds) = &args.seeds {
        return detection_rate(rt, opts, args, &chosen, &seeds.0);
    }
    let dir = ReportDir::create(&args.report_dir)?;
    let _hold = crate::services::native::process::ReportHold::take();
    let started = Instant::now();
    let mut report = new_report("catalogue", args.seed, Budget { schedules: Some(args.budget), seconds: None }, Shard::default());
    let options = Options { schedules: Some(args.budget), seed: args.seed, jobs: args.jobs, ..Options::default() };
    // One list of explorations for every workload, so that the slots stay busy across
    // workloads: each workload's mutants, then its reference on each scenario used.
    let (mut jobs, mut sections) = (Vec::new(), Vec::new());
    for plan in &chosen {
        sections.push(Section::plan(plan, &options, &mut jobs));
    }
    let result = with_services(rt, opts, |endpoints| {
        let mut table = String::new();
        let mut at = 0;
        explore::explore_each(endpoints, &jobs, options.jobs, |job, r| {
            let section = sections.iter_mut().find(|x| x.jobs.contains(&at)).expect("every job is in a section");
            let last = at + 1 == section.jobs.end;
            if at == section.jobs.start {
                section.header(&options, &mut table)?;
            }
            at += 1;
            section.row(job, r?, &dir, &mut report, &mut table)?;
            if last {
                section.verdict(&options, &mut table);
            }
            Ok(())
        })?;
        let md = dir.path().join("catalogue.md");
        std::fs::write(&md, &table)?;
        println!("written to {}", md.display());
        anyhow::Ok(())
    });
    conclude(&dir, &mut report, started, result)?;
    println!("reports: {}", dir.path().display());
    Ok(report.exit_code())
}

/// `catalogue --seeds`: every system of `chosen` explored once per seed (in seed order, each
/// seed's explorations as one catalogue's), then one table per workload: per system the seeds
/// that caught it and the median schedules to its first failure over them. Written as
/// `detection.md` into `--report-dir`. Exit 0 when every mutant was caught on every seed and
/// every reference and harmless variant passed on every seed, 1 otherwise.
fn detection_rate(
    rt: &tokio::runtime::Runtime,
    opts: &ServiceOptions,
    args: &CatalogueArgs,
    chosen: &[Vec<(&'static str, scenario::Scenario)>],
    seeds: &[u64],
) -> Result<i32> {
    let dir = ReportDir::create(&args.report_dir)?;
    let _hold = crate::services::native::process::ReportHold::take();
    let started = Instant::now();
    let mut report = new_report("catalogue", seeds[0], Budget { schedules: Some(args.budget), seconds: None }, Shard::default());
    let mut jobs = Vec::new();
    for &seed in seeds {
        let options = Options { schedules: Some(args.budget), seed, jobs: args.jobs, ..Options::default() };
        for plan in chosen {
            Section::plan(plan, &options, &mut jobs);
        }
    }
    // Per (workload, system, scenario): the seeds that caught it, with its schedules to the
    // first failure, and the seeds that did not.
    type Key = (String, String, String, bool);
    /// (seed, schedules to the first failure) of each seed that caught it; the seeds that did not.
    type Seeds = (Vec<(u64, u64)>, Vec<u64>);
    let mut caught: std::collections::BTreeMap<Key, Seeds> = Default::default();
    let mut order: Vec<Key> = Vec::new();
    let result = with_services(rt, opts, |endpoints| {
        explore::explore_each(endpoints, &jobs, args.jobs, |job, r| {
            let r = r?;
            // One test case per system and seed in the reports (a mutant's passes when caught).
            let mut sr = ScenarioReport::explored(job.scenario, job.system, &r);
            sr.name = format!("{} (seed {})", sr.name, job.options.seed);
            if !must_pass(job.scenario, job.system) {
                sr.expected = Outcome::Fail;
            }
            report.scenarios.push(sr);
            let key = (job.scenario.workload.name().to_string(), job.system.to_string(), job.scenario.name.clone(), must_pass(job.scenario, job.system));
            if !order.contains(&key) {
                order.push(key.clone());
            }
            let entry = caught.entry(key).or_default();
            match &r.failure {
                Some(f) => entry.0.push((job.options.seed, f.schedules_until)),
                None => entry.1.push(job.options.seed),
            }
            println!(
                "seed {} {} {}: {}",
                job.options.seed,
                job.scenario.name,
                job.system,
                r.failure.as_ref().map_or("not caught".to_string(), |f| format!("caught after {} schedules", f.schedules_until))
            );
            Ok(())
        })
    });
    conclude(&dir, &mut report, started, result)?;
    let mut table = String::new();
    let mut ok = true;
    let mut workload = String::new();
    for key in &order {
        let (w, system, sc, passes) = key;
        if *w != workload {
            workload = w.clone();
            writeln!(
                table,
                "
## {w}: detection over seeds {} (budget {} schedules per system and seed)
",
                seed_ranges(seeds),
                args.budget
            )?;
            table.push_str("| system | scenario | caught on seeds | caught | median schedules to first failure |
|---|---|---|---|---|
");
        }
        let (hits, misses) = &caught[key];
        let mut hit_seeds: Vec<u64> = hits.iter().map(|(s, _)| *s).collect();
        hit_seeds.sort_unstable();
        let mut until: Vec<u64> = hits.iter().map(|(_, n)| *n).collect();
        until.sort_unstable();
        let median = until.get(until.len() / 2).map_or("–".to_string(), |m| m.to_string());
        ok &= if *passes { hits.is_empty() } else { misses.is_empty() };
        let name = if *passes { must_pass_label(system) } else { system.clone() };
        writeln!(table, "| {name} | {sc} | {} | {}/{} | {median} |", seed_ranges(&hit_seeds), hits.len(), hits.len() + misses.len())?;
    }
    writeln!(table, "
{}", if ok { "every mutant caught on every seed, the reference passes on every seed" } else { "FAIL" })?;
    print!("{table}");
    let md = dir.path().join("detection.md");
    std::fs::write(&md, &table)?;
    println!("written to {}", md.display());
    Ok(if ok { 0 } else { 1 })
}

/// Ends `report` with the wall time since `started` and the error of `result` if any, writes
/// the report files into `dir`, then returns `result`.
fn conclude(dir: &ReportDir, report: &mut crate::report::model::RunReport, started: Instant, result: Result<()>) -> Result<()> {
    report.wall_s = started.elapsed().as_secs_f64();
    if let Err(e) = &result {
        report.ended_by(e);
    }
    report.conclude();
    dir.finish(report)?;
    result
}

/// Whether the catalogue must find `system` of `sc`'s workload correct: the reference, or a
/// harmless variant ([`crate::spec::SystemInfo::must_pass`]). Every other system is a mutant
/// it must catch.
fn must_pass(sc: &scenario::Scenario, system: &str) -> bool {
    system == "reference" || sc.workload.systems().iter().any(|i| i.name == system && i.must_pass)
}

/// The row label of a system that must pass.
fn must_pass_label(system: &str) -> String {
    format!("{system} (must not be caught)")
}

const HEADER: &str = "| system | caught | schedules to first failure | s to first failure | wall s (with shrinking) | shrunk length | invariant |\n|---|---|---|---|---|---|---|\n";

/// One workload's part of the catalogue: its explorations (each mutant on its scenario, then
/// the reference on each scenario used) are `jobs` of the whole list, and its rows form one
/// table whose verdict line follows them. A row of a system explored on another scenario
/// than the workload's main one (its first) names it.
struct Section<'s> {
    main: &'s scenario::Scenario,
    mutants: usize,
    harmless: usize,
    jobs: std::ops::Range<usize>,
    all_caught: bool,
    /// The reference and every harmless variant passed.
    passing_ok: bool,
    found_after: Vec<f64>,
}

impl<'s> Section<'s> {
    /// Appends the explorations of `plan` (each mutant with its scenario; the first scenario
    /// is the workload's main one) to `jobs`, with `options`, and returns their section.
    fn plan(plan: &'s [(&'static str, scenario::Scenario)], options: &Options, jobs: &mut Vec<explore::Job<'s>>) -> Section<'s> {
        let start = jobs.len();
        let mutants: Vec<_> = plan.iter().filter(|(n, sc)| !must_pass(sc, n)).collect();
        let harmless: Vec<_> = plan.iter().filter(|(n, sc)| *n != "reference" && must_pass(sc, n)).collect();
        jobs.extend(mutants.iter().chain(&harmless).map(|(system, scenario)| explore::Job { system, scenario, options: options.clone() }));
        let mut scenarios: Vec<&scenario::Scenario> = Vec::new();
        for (_, sc) in plan {
            if !scenarios.iter().any(|x| x.name == sc.name) {
                scenarios.push(sc);
            }
        }
        jobs.extend(scenarios.into_iter().map(|scenario| explore::Job { system: "reference", scenario, options: options.clone() }));
        Section {
            main: &plan[0].1,
            mutants: mutants.len(),
            harmless: harmless.len(),
            jobs: start..jobs.len(),
            all_caught: true,
            passing_ok: true,
            found_after: Vec::new(),
        }
    }

    fn label(&self, name: &str, sc: &scenario::Scenario) -> String {
        match sc.name == self.main.name {
            true => name.to_string(),
            false => format!("{name} (on {})", sc.name),
        }
    }

    /// Prints the section's title and table header, and appends them to `table`.
    fn header(&self, options: &Options, table: &mut String) -> Result<()> {
        let s = self.main;
        println!(
            "catalogue of {}: {} mutants, {}then the reference; budget {} schedules each, seed {}, scenario {}\n",
            s.workload.name(),
            self.mutants,
            match self.harmless {
                0 => String::new(),
                n => format!("{n} harmless variant(s) that must pass, "),
            },
            options.schedules.unwrap_or_default(),
            options.seed,
            s.name
        );
        writeln!(table, "## {}\n", s.workload.name())?;
        table.push_str(HEADER);
        print!("{HEADER}");
        Ok(())
    }

    /// Records the exploration `r` of `job` (a mutant must be caught, the reference must
    /// not): its scenario report and timeline into `report` and `dir`, its row printed and
    /// appended to `table`. Errors: a timeline that cannot be written.
    fn row(&mut self, job: &explore::Job, r: Report, dir: &ReportDir, report: &mut crate::report::model::RunReport, table: &mut String) -> Result<()> {
        let (name, sc) = (job.system, job.scenario);
        let mut sr = ScenarioReport::explored(sc, name, &r);
        let label = match must_pass(sc, name) {
            true => {
                self.passing_ok &= r.failure.is_none();
                must_pass_label(name)
            }
            false => {
                self.all_caught &= r.failure.is_some();
                self.found_after.extend(r.failure.as_ref().map(|f| f.found_after.as_secs_f64()));
                sr.expected = Outcome::Fail;
                name.to_string()
            }
        };
        add_timeline(dir, &mut sr, r.failure.as_ref().map(|f| &f.minimal), true)?;
        report.scenarios.push(sr);
        let line = row(&self.label(&label, sc), &r);
        println!("{line}");
        writeln!(table, "{line}")?;
        Ok(())
    }

    /// Prints the section's verdict line (every mutant caught and the reference passing, or
    /// FAIL; the median time to a mutant's first failure) and appends it to `table`.
    fn verdict(&mut self, options: &Options, table: &mut String) {
        self.found_after.sort_by(f64::total_cmp);
        let median = self.found_after.get(self.found_after.len() / 2).map_or("–".to_string(), |m| format!("{m:.1} s"));
        let verdict = format!(
            "\nbudget {} schedules per system, seed {}, scenario {}, {} slot(s): {}; median time to a mutant's first failure {median}\n",
            options.schedules.unwrap_or_default(),
            options.seed,
            self.main.name,
            options.jobs.max(1),
            match (self.all_caught && self.passing_ok, self.harmless) {
                (true, 0) => "every mutant caught, the reference passes",
                (true, _) => "every mutant caught, the reference passes, and so does every harmless variant",
                (false, _) => "FAIL",
            }
        );
        print!("{verdict}");
        table.push_str(&verdict);
        table.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_as_inclusive_ranges_or_lists_and_print_as_runs() {
        assert_eq!(parse_seeds("1..10").unwrap().0, (1..=10).collect::<Vec<u64>>());
        assert_eq!(parse_seeds("3,1,7").unwrap().0, vec![3, 1, 7]);
        assert!(parse_seeds("10..1").unwrap_err().contains("expected seeds"));
        assert!(parse_seeds("a..b").is_err() && parse_seeds("").is_err());
        assert_eq!(seed_ranges(&[1, 2, 3, 4, 6, 8, 9, 10]), "1-4, 6, 8-10");
        assert_eq!(seed_ranges(&[]), "none");
    }
}
