//! Standard output for command-line tools that behave like Unix tools: when
//! the reader has gone (`toolgate check … | head -3`), the process ends
//! quietly with status 0, as ripgrep's does, instead of panicking in
//! `println!` (Rust ignores SIGPIPE, so the write fails with `EPIPE`).

use std::io::{self, Write};

/// `stdout`, ending the process with status 0 on a closed pipe.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        quiet_on_closed_pipe(io::stdout().lock().write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        quiet_on_closed_pipe(io::stdout().lock().flush())
    }
}

fn quiet_on_closed_pipe<T>(result: io::Result<T>) -> io::Result<T> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => other,
    }
}

/// Writes `args` and a newline to [`Stdout`]; any other write error ends
/// the process with status 2 and a message on stderr (nothing left to say
/// the answer to).
pub fn line(args: std::fmt::Arguments<'_>) {
    text(format_args!("{args}\n"));
}

/// Writes `args` to [`Stdout`] without a newline (see [`line`]).
pub fn text(args: std::fmt::Arguments<'_>) {
    let mut out = Stdout;
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        eprintln!("cannot write to standard output: {e}");
        std::process::exit(2);
    }
}
