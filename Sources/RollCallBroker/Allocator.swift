#if canImport(Glibc)
    import Glibc
#endif

/// The C allocator, as far as the broker needs to talk to it.
///
/// glibc keeps memory that was freed in its arenas for reuse, and its mmap threshold grows after large frees, so the
/// replies and pipes of closed connections (allocated by libzmq's I/O thread) can stay in the broker's RSS long after
/// the connections are gone. `malloc_trim` gives the free pages back to the system.
enum Allocator {
    private typealias Trim = @convention(c) (Int) -> Int32

    /// glibc's `malloc_trim`, looked up at run time: Swift's Glibc module does not declare it, and other C libraries
    /// do not have it.
    private static let trim: Trim? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "malloc_trim") else { return nil }
        return unsafeBitCast(symbol, to: Trim.self)
    }()

    /// Gives the free memory of every arena back to the system; returns whether there was a way to.
    @discardableResult
    static func giveBackFreeMemory() -> Bool {
        guard let trim else { return false }
        _ = trim(0)
        return true
    }
}
