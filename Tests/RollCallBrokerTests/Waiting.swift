/// Waits until `condition` holds, checking it every few milliseconds, for at most `seconds`; throws naming `what`
/// if it never does. The one deadline-bounded wait of these tests: nothing here sleeps to decide a pass.
func waitUntil(
    _ what: String = "the condition", seconds: Double = 5, _ condition: () -> Bool
) async throws {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1_000))
    while !condition() {
        guard ContinuousClock.now < deadline else { throw Failure("\(what) did not come within \(seconds) s") }
        try await Task.sleep(for: .milliseconds(2))
    }
}
