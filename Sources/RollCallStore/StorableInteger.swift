/// SQLite's INTEGER is a signed 64-bit number. Seqs (about 2^53 at most, as the broker makes them) always fit;
/// one that does not is refused with an error rather than stored as a negative number that reads back wrong.
func storableInteger(_ value: UInt64, _ what: @autoclosure () -> String, path: String) throws(StoreError) -> Int64 {
    guard let integer = Int64(exactly: value) else {
        throw StoreError(
            .write, path: path, message: "\(what()) \(value) is above \(Int64.max), the largest SQLite INTEGER")
    }
    return integer
}
