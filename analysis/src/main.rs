fn main() { println!("roce-analyze: not yet implemented"); }
