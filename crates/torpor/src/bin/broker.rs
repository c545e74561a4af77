//! `torpor-broker`: the file broker of a root holder (`torpor::broker`), a binary of its own
//! so that the privileged process runs little code and keeps little memory (an exec of the
//! whole runtime costs about 1.5 MiB of its own, a fork of the holder its pages once the holder
//! has gone on or gone dormant). `torpor-broker --node STATE` is the node's broker, serving
//! every root holder of the state root `STATE` (`torpor::broker::node`).

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1..) {
        Some([flag, state]) if flag == "--node" => {
            torpor::broker::node::main(std::path::Path::new(state))
        }
        Some(rest) => torpor::broker::serve(rest),
        None => torpor::broker::serve(&[]),
    }
}
