fn main() {
    std::process::exit(crashpoint::cli::main());
}
