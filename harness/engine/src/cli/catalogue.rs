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
/// Exit 0 when every mutant was caught and the reference passed, 1 otherwise.
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
    report.wall_s = started.elapsed().as_secs_f64();
    if let Err(e) = &result {
        report.ended_by(e);
    }
    report.conclude();
    dir.finish(&report)?;
    result?;
    println!("reports: {}", dir.path().display());
    Ok(report.exit_code())
}

const HEADER: &str = "| system | caught | schedules to first failure | s to first failure | wall s (with shrinking) | shrunk length | invariant |\n|---|---|---|---|---|---|---|\n";

/// One workload's part of the catalogue: its explorations (each mutant on its scenario, then
/// the reference on each scenario used) are `jobs` of the whole list, and its rows form one
/// table whose verdict line follows them. A row of a system explored on another scenario
/// than the workload's main one (its first) names it.
struct Section<'s> {
    main: &'s scenario::Scenario,
    mutants: usize,
    jobs: std::ops::Range<usize>,
    all_caught: bool,
    reference_ok: bool,
    found_after: Vec<f64>,
}

impl<'s> Section<'s> {
    /// Appends the explorations of `plan` (each mutant with its scenario; the first scenario
    /// is the workload's main one) to `jobs`, with `options`, and returns their section.
    fn plan(plan: &'s [(&'static str, scenario::Scenario)], options: &Options, jobs: &mut Vec<explore::Job<'s>>) -> Section<'s> {
        let start = jobs.len();
        let mutants: Vec<_> = plan.iter().filter(|(n, _)| *n != "reference").collect();
        jobs.extend(mutants.iter().map(|(system, scenario)| explore::Job { system, scenario, options: options.clone() }));
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
            jobs: start..jobs.len(),
            all_caught: true,
            reference_ok: true,
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
            "catalogue of {}: {} mutants, then the reference; budget {} schedules each, seed {}, scenario {}\n",
            s.workload.name(),
            self.mutants,
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
        let label = match name == "reference" {
            true => {
                self.reference_ok &= r.failure.is_none();
                "reference (must not be caught)"
            }
            false => {
                self.all_caught &= r.failure.is_some();
                self.found_after.extend(r.failure.as_ref().map(|f| f.found_after.as_secs_f64()));
                sr.expected = Outcome::Fail;
                name
            }
        };
        add_timeline(dir, &mut sr, r.failure.as_ref().map(|f| &f.minimal), true)?;
        report.scenarios.push(sr);
        let line = row(&self.label(label, sc), &r);
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
            if self.all_caught && self.reference_ok { "every mutant caught, the reference passes" } else { "FAIL" }
        );
        print!("{verdict}");
        table.push_str(&verdict);
        table.push('\n');
    }
}
