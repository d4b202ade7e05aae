import Foundation
import Observation
import RollCallKit

// A conversation list over RollCallKit, for a terminal: the SDK's story on Linux (docs/swift-sdk.md, Example).
//
//   rollcall-example-contacts --url ws://127.0.0.1:7733/v1/ws [--token JWT] [--me alice] [--group team]
//       [--cache FILE] bob carol ...
//
// It prints the list each time the store changes (through Observation, as SwiftUI would redraw it), and reads
// commands on stdin: `bg` (enterBackground, 5 s), `fg` (enterForeground), `net` (reconnectNow: the network is
// back), `status STATUS [TEXT]`, `quit`. With stdin at its end it runs until it is stopped.

/// The command line.
struct Options: Sendable {
    var url: String
    var token: String?
    var me: UserID?
    var group: GroupID?
    var cache: URL?
    var contacts: [UserID]

    init?(_ arguments: [String]) {
        var arguments = arguments
        func option(_ name: String) -> String? {
            guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
            defer { arguments.removeSubrange(index...(index + 1)) }
            return arguments[index + 1]
        }
        guard let url = option("--url") else { return nil }
        self.url = url
        token = option("--token")
        me = option("--me").flatMap(UserID.init(validating:))
        group = option("--group").flatMap(GroupID.init(validating:))
        cache = option("--cache").map { URL(fileURLWithPath: $0) }
        contacts = arguments.compactMap(UserID.init(validating:))
    }
}

/// Prints the list now and again at each change of what it read: what a SwiftUI view's body does.
@MainActor
enum Screen {
    static func show(_ client: PresenceClient, _ options: Options) {
        let screen = withObservationTracking {
            ContactList.render(client.store, group: options.group, contacts: options.contacts)
        } onChange: {
            Task { @MainActor in show(client, options) }
        }
        FileHandle.standardOutput.write(Data("---\n\(screen)\n".utf8))
    }
}

@MainActor
func run(_ options: Options) async {
    let client = PresenceClient(url: options.url, me: options.me, token: options.token, cacheFile: options.cache)
    if let group = options.group { client.follow(group: group) }
    for contact in options.contacts { client.follow(contact) }
    Screen.show(client, options)
    let commands = AsyncStream<String> { continuation in
        Thread {
            while let line = readLine() { continuation.yield(line) }
            continuation.finish()
        }.start()
    }
    var quit = false
    loop: for await line in commands {
        let words = line.split(separator: " ").map(String.init)
        switch words.first {
        case "bg": client.enterBackground(after: .seconds(5))
        case "fg": client.enterForeground()
        case "net": client.reconnectNow()
        case "status":
            guard words.count > 1, let status = Status(rawValue: words[1]) else { continue }
            client.setStatus(status, text: words.count > 2 ? words[2...].joined(separator: " ") : nil)
        case "quit":
            quit = true
            break loop
        default: continue
        }
    }
    // Without a terminal (stdin at its end) the list stays on screen until the process is stopped.
    while !quit { try? await Task.sleep(for: .seconds(3_600)) }
    await client.close()
}

guard let options = Options(Array(CommandLine.arguments.dropFirst())) else {
    FileHandle.standardError.write(
        Data(
            "usage: rollcall-example-contacts --url WS_URL [--token JWT] [--me USER] [--group ID] [--cache FILE] USER...\n"
                .utf8))
    exit(2)
}
await run(options)
