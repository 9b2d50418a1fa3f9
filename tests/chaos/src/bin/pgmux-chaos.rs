//! The chaos suite's long form (`make chaos`), and the driver the short form runs: started on the machine,
//! it creates a network namespace and runs itself again inside it; inside, it runs the scenarios.

use std::process::ExitCode;

use pgmux_chaos::driver::{Options, drive};
use pgmux_chaos::isolate::{INSIDE_ENV, catch_signals, run_isolated};
use pgmux_chaos::topology::PROXY_A;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match Options::parse(&args) {
        Ok(opts) => opts,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = catch_signals("pgmux-chaos") {
        eprintln!("pgmux-chaos: {e}");
        return ExitCode::from(2);
    }
    match std::env::var(INSIDE_ENV) {
        Ok(namespace) => inside(&opts, &namespace),
        Err(_) => outside(&args),
    }
}

fn outside(args: &[String]) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("pgmux-chaos: cannot find my own executable: {e}");
            return ExitCode::from(2);
        }
    };
    match run_isolated(&exe, args, PROXY_A) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("pgmux-chaos: {e}");
            ExitCode::from(2)
        }
    }
}

fn inside(opts: &Options, namespace: &str) -> ExitCode {
    let results = match drive(opts, namespace) {
        Ok(results) => results,
        Err(e) => {
            eprintln!("pgmux-chaos: {e}");
            return ExitCode::from(2);
        }
    };
    println!("{}", pgmux_chaos::publish::markdown(&results));
    match pgmux_chaos::publish::write(&results) {
        Ok(()) => {
            eprintln!("pgmux-chaos: results in {} and {}", opts.json.display(), opts.markdown.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pgmux-chaos: {e}");
            ExitCode::from(2)
        }
    }
}
