import ArgumentParser
import Foundation
import RollCallClient
import RollCallCore
import Synchronization

struct GroupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "group",
        abstract: "Define, edit, read or delete a group, and with --watch follow it: 'team-7: 3 of 5 online (+carol)'.")

    @OptionGroup var endpoints: ClientEndpoints
    @OptionGroup var keys: ClientKeys
    @Option(help: "Replace the members, comma-separated.") var members: String?
    @Option(help: "Add members, comma-separated.") var add: String?
    @Option(help: "Remove members, comma-separated.") var remove: String?
    @Flag(help: "Delete the group.") var delete = false
    @Flag(help: "Keep following the group and print a line per message, until interrupted.") var watch = false
    @Argument(help: "The group id.") var name: String

    func validate() throws {
        if delete && (members != nil || add != nil || remove != nil || watch) {
            throw ValidationError("--delete takes no --members, --add, --remove or --watch")
        }
    }

    func run() async throws {
        guard let group = GroupID(validating: name) else {
            throw ValidationError("invalid group id '\(name)': 1 to 128 bytes of A-Z a-z 0-9 . _ @ + -")
        }
        func list(_ text: String?) throws -> [UserID]? {
            try text.map { try userIDs($0.split(separator: ",").map(String.init)) }
        }
        let edit = GroupEdit(members: try list(members), add: try list(add) ?? [], remove: try list(remove) ?? [])
        let (commands, update, watch, delete) = (try endpoints.commands(), try endpoints.update(), watch, delete)
        do {
            let client = try CommandClient(endpoints: commands, credentials: try keys.credentials())
            if delete {
                emit(try client.ungroup(group) ? "\(group): deleted" : "\(group): no such group")
                return
            }
            let snapshot = try client.group(group, edit)
            emit(describe(group, snapshot.counts, changed: [], removed: []))
            guard watch else { return }
            try await runUntilSignalled { stop in
                let watcher = try PresenceWatcher(
                    endpoint: update, credentials: try keys.credentials(), viewer: try keys.viewer())
                let first = Atomic<Bool>(true)
                _ = watcher.observe(group: group) { update in
                    // The first message is the aggregate a new subscriber gets; the line above said it already.
                    if first.exchange(false, ordering: .relaxed) && update.changed.isEmpty && update.removed.isEmpty {
                        return
                    }
                    emit(
                        update.deleted
                            ? "\(group): deleted"
                            : describe(group, update.counts, changed: update.changed, removed: update.removed))
                }
                while !stop.isSet { Thread.sleep(forTimeInterval: 0.1) }
                watcher.close()
            }
        } catch let error as ValidationError {
            throw error
        } catch {
            throw fail(error)
        }
    }
}

/// `team-7: 3 of 5 online (+carol -bob, removed dave)`: who became available (+) or not (-), who was taken out.
func describe(_ group: GroupID, _ counts: StatusCounts, changed: [PresenceRecord], removed: [UserID]) -> String {
    var notes = changed.map { ($0.status.isAvailable ? "+" : "-") + $0.user.rawValue }.joined(separator: " ")
    if !removed.isEmpty {
        notes += (notes.isEmpty ? "" : ", ") + "removed " + removed.map(\.rawValue).joined(separator: " ")
    }
    return "\(group): \(counts.available) of \(counts.total) online" + (notes.isEmpty ? "" : " (\(notes))")
}
