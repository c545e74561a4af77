//! `torpor-broker`: the file broker of a root holder (`torpor::broker`), a binary of its own
//! so that the privileged process runs little code and keeps little memory (an exec of the
//! whole runtime costs about 1.5 MiB of its own, a fork of the holder its pages once the holder
//! has gone on or gone dormant).

fn main() {
    let args: Vec<String> = std::env::args().collect();
    torpor::broker::serve(&args[1..]);
}
