//! `crashpoint catalogue`: every mutant, then the reference, explored under the same budget.

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
    /// Mutants explored at once, each on one slot (see `run --jobs`); the reference then runs
    /// on this many slots. Default: two per core. The table and reports do not depend on it,
    /// apart from wall times.
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

/// Explores every mutant of the catalogue and then the reference with the same budget and
/// seed, prints the detection table, and writes it as `catalogue.md` into `--report-dir` beside
/// the reports (where a mutant's test case passes when it is caught). Exit 0 when every mutant
/// was caught and the reference passed, 1 otherwise.
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
    let result = with_services(rt, opts, |endpoints| {
        let options = Options { schedules: Some(args.budget), seed: args.seed, jobs: args.jobs, ..Options::default() };
        let mut table = String::new();
        for plan in &chosen {
            workload_catalogue(endpoints, plan, &options, &dir, &mut report, &mut table)?;
        }
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

/// Explores every mutant of one workload on its scenario (`plan`: each mutant with its
/// scenario; the workload's first scenario is the main one), then the reference on each
/// scenario used, with `options`; prints the detection table, appends it to `table` (a
/// section per workload) and the scenario reports to `report`. A row of a mutant or reference
/// run on another scenario than the main one names it. Errors: services, or a report that
/// cannot be written.
fn workload_catalogue(
    endpoints: &crate::services::Endpoints,
    plan: &[(&'static str, scenario::Scenario)],
    options: &Options,
    dir: &ReportDir,
    report: &mut crate::report::model::RunReport,
    table: &mut String,
) -> Result<()> {
    let s = &plan[0].1;
    let mutants: Vec<(&str, &scenario::Scenario)> = plan.iter().filter(|(n, _)| *n != "reference").map(|(n, s)| (*n, s)).collect();
    let mut scenarios: Vec<&scenario::Scenario> = Vec::new();
    for (_, sc) in plan {
        if !scenarios.iter().any(|x| x.name == sc.name) {
            scenarios.push(sc);
        }
    }
    let label = |name: &str, sc: &scenario::Scenario| match sc.name == s.name {
        true => name.to_string(),
        false => format!("{name} (on {})", sc.name),
    };
    let header = "| system | caught | schedules to first failure | s to first failure | wall s (with shrinking) | shrunk length | invariant |\n|---|---|---|---|---|---|---|\n";
    println!(
        "catalogue of {}: {} mutants, then the reference; budget {} schedules each, seed {}, scenario {}\n",
        s.workload.name(),
        mutants.len(),
        options.schedules.unwrap_or_default(),
        options.seed,
        s.name
    );
    writeln!(table, "## {}\n", s.workload.name())?;
    table.push_str(header);
    print!("{header}");
    let mut all_caught = true;
    let mut found_after = Vec::new();
    let jobs: Vec<explore::Job> = mutants.iter().map(|&(system, scenario)| explore::Job { system, scenario, options: options.clone() }).collect();
    explore::explore_each(endpoints, &jobs, options.jobs, |job, r| {
        let (name, sc) = (job.system, job.scenario);
        let r = r?;
        all_caught &= r.failure.is_some();
        found_after.extend(r.failure.as_ref().map(|f| f.found_after.as_secs_f64()));
        let mut sr = ScenarioReport::explored(sc, name, &r);
        sr.expected = Outcome::Fail;
        add_timeline(dir, &mut sr, r.failure.as_ref().map(|f| &f.minimal), true)?;
        report.scenarios.push(sr);
        let line = row(&label(name, sc), &r);
        println!("{line}");
        writeln!(table, "{line}")?;
        Ok(())
    })?;
    let mut reference_ok = true;
    for sc in scenarios {
        let r = explore::explore(endpoints, scenario::system_of(sc, "reference")?, sc, options, |_| {})?;
        reference_ok &= r.failure.is_none();
        let mut sr = ScenarioReport::explored(sc, "reference", &r);
        add_timeline(dir, &mut sr, r.failure.as_ref().map(|f| &f.minimal), true)?;
        report.scenarios.push(sr);
        let line = row(&label("reference (must not be caught)", sc), &r);
        println!("{line}");
        writeln!(table, "{line}")?;
    }
    found_after.sort_by(f64::total_cmp);
    let median = found_after.get(found_after.len() / 2).map_or("–".to_string(), |m| format!("{m:.1} s"));
    let verdict = format!(
        "\nbudget {} schedules per system, seed {}, scenario {}, {} slot(s): {}; median time to a mutant's first failure {median}\n",
        options.schedules.unwrap_or_default(),
        options.seed,
        s.name,
        options.jobs.max(1),
        if all_caught && reference_ok { "every mutant caught, the reference passes" } else { "FAIL" }
    );
    print!("{verdict}");
    table.push_str(&verdict);
    table.push('\n');
    Ok(())
}
