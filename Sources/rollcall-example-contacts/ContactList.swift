import Foundation
import RollCallKit

/// The screen of a chat app's conversation list, as text: a group header ("3 of 5 online") and one line per
/// contact with a dot and a status or "last seen 5 min ago". It reads only the store, as a SwiftUI view would.
@MainActor
enum ContactList {
    static func render(_ store: PresenceStore, group: GroupID?, contacts: [UserID], now: Date = Date()) -> String {
        var lines: [String] = []
        if let group {
            let header = store.group(group)
            lines.append("\(group): \(header.online) of \(header.total) online\(header.stale ? " (updating)" : "")")
        }
        for contact in contacts {
            let presence = store[contact]
            let dot = presence.stale ? "◌" : presence.isAvailable ? "●" : "○"
            var line = "\(dot) \(contact.rawValue.padding(toLength: 12, withPad: " ", startingAt: 0))"
            if presence.isAvailable {
                line += presence.status.rawValue + (presence.text.map { " \"\($0)\"" } ?? "")
            } else if let ago = store.lastSeenAgo(contact, now: Int64(now.timeIntervalSince1970 * 1_000)) {
                line += "last seen \(describe(ago))"
            } else {
                line += presence.known ? "offline" : "…"
            }
            lines.append(line)
        }
        if store.brokerLost { lines.append("(connection lost: showing last known presence)") }
        return lines.joined(separator: "\n")
    }

    /// "just now", "5 min ago", "3 h ago", "2 d ago".
    static func describe(_ milliseconds: Int64) -> String {
        let minutes = milliseconds / 60_000
        if minutes < 1 { return "just now" }
        if minutes < 60 { return "\(minutes) min ago" }
        if minutes < 24 * 60 { return "\(minutes / 60) h ago" }
        return "\(minutes / (24 * 60)) d ago"
    }
}
