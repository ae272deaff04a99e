// Chat tasks: plain conversation intents with held-out phrasing families (see task-generator-detail.h and
// docs/tasks.md).
#include <algorithm>
#include <map>
#include <set>

#include "moxi/base/error.h"
#include "moxi/eval/task-generator-detail.h"

namespace moxi::eval::detail {
// ---------------------------------------------------------------------------------------------------------
// chat

// One template per intent; its test-only phrasing family is the held-out rule.
const std::vector<template_info>& chat_templates() {
  static const std::vector<template_info> t = {
      {"greeting", false, "phrasing family 'time_of_day' test only"},
      {"capabilities", false, "phrasing family 'good_at' test only"},
      {"identity", false, "phrasing family 'name' test only"},
      {"help", false, "phrasing family 'stuck' test only"},
      {"usage", false, "phrasing family 'how_to_ask' test only"},
      {"thanks", false, "phrasing family 'appreciate' test only"},
      {"how_are_you", false, "phrasing family 'doing' test only"},
      {"goodbye", false, "phrasing family 'later' test only"},
      {"repeat", false, "phrasing family 'write_back' test only; the text from the split's name pools"},
  };
  return t;
}

// What the assistant can do, stated in the references of the capability intents.
constexpr const char* kCan =
    "I can run shell commands in a sandbox, fix small Python programs and do arithmetic step by step.";

struct chat_intent {
  std::vector<family> families;  // `suffix` unused
  std::vector<std::string> replies;
};

const std::map<std::string, chat_intent>& chat_intents() {
  const std::string can = kCan;
  static const std::map<std::string, chat_intent> c = {
      {"greeting",
       {{{"hello", false, false, {"hello", "Hello!", "hello there", "Hello, moxi."}},
         {"hi", false, false, {"hi", "Hi!", "hey", "hey there", "hiya"}},
         {"casual_hi", false, false, {"yo", "heya", "howdy", "hii", "hey :)", "hi moxi", "hey moxi!", "helo"}},
         {"formal_hi", false, false, {"Greetings.", "Good day!", "Hello, is anyone there?", "hi, nice to meet you",
                                      "Hello again."}},
         {"time_of_day", true, false, {"good morning", "Good evening!", "good afternoon"}}},
        {"Hello! " + can + " What would you like to do?", "Hi there! " + can + " How can I help?",
         "Hey! " + can + " What do you need?"}}},
      {"capabilities",
       {{{"what_can", false, false, {"what can you do?", "What can you do", "what are you able to do?"}},
         {"tasks", false, false, {"What kind of tasks do you handle?", "which tasks can you help with?"}},
         {"capable", false, false, {"what do you do?", "what can u do", "What are you capable of?",
                                    "what can I use you for?", "show me what you can do", "list your features",
                                    "what do you know how to do?"}},
         {"good_at", true, false, {"what are you good at?", "What are your skills?"}}},
        {can + " Give me a task.", "Three things: " + can + " Just ask.",
         can + " What should we start with?"}}},
      {"identity",
       {{{"who", false, false, {"who are you?", "Who are you", "what are you?"}},
         {"introduce", false, false, {"introduce yourself", "Tell me about yourself."}},
         {"who_is", false, false, {"who am I talking to?", "who is this?", "are you a bot?", "are you human?",
                                   "tell me who you are", "What is this thing?", "who r u"}},
         {"name", true, false, {"what is your name?", "What's your name?"}}},
        {"I am moxi, a small assistant. " + can, "I'm moxi, a small model trained from scratch. " + can}}},
      {"help",
       {{{"help", false, false, {"help", "Help!", "help me", "can you help me?"}},
         {"need", false, false, {"I need some help.", "i need help"}},
         {"assist", false, false, {"please help", "can u help", "help pls", "I could use a hand.",
                                   "I have a problem.", "can you assist me?", "I don't know what to do."}},
         {"stuck", true, false, {"I'm stuck.", "i am stuck, what now?"}}},
        {"Sure, I can help. " + can + " Tell me what you need.",
         "Of course. " + can + " What is the task?"}}},
      {"usage",
       {{{"how_use", false, false, {"how do I use you?", "How do I use this?", "how should I use you"}},
         {"start", false, false, {"How do I start?", "where do I begin?"}},
         {"works", false, false, {"how does this work?", "what should I type?", "how do I talk to you?",
                                  "what do I do now?", "any tips for using you?", "How does one use moxi?"}},
         {"how_to_ask", true, false, {"how should I ask you things?", "How do I give you a task?"}}},
        {"Just type a request. " + can + " Ask one thing at a time.",
         "Write what you want in plain words. " + can}}},
      {"thanks",
       {{{"thanks", false, false, {"thanks", "Thanks!", "thank you", "thanks a lot"}},
         {"cheers", false, false, {"cheers", "ty", "thx!"}},
         {"grateful", false, false, {"thank u", "great, thanks", "ok thank you", "Thank you so much.",
                                     "many thanks", "tysm", "thanks, that worked"}},
         {"appreciate", true, false, {"I appreciate it.", "much appreciated"}}},
        {"You're welcome! Anything else?", "Glad to help. Ask me anything else.",
         "No problem. I'm here if you need more."}}},
      {"how_are_you",
       {{{"how_are", false, false, {"how are you?", "How are you", "how r u"}},
         {"whats_up", false, false, {"what's up?", "sup", "How's it going?"}},
         {"feeling", false, false, {"how's your day?", "how do you feel?", "are you ok?", "hows it going",
                                    "how are u", "you good?", "how have you been?"}},
         {"doing", true, false, {"how are you doing?", "how are things?"}}},
        {"I'm fine, thanks. " + can + " What can I do for you?",
         "Doing well, thank you. What would you like to work on?"}}},
      {"goodbye",
       {{{"bye", false, false, {"bye", "Bye!", "goodbye"}},
         {"night", false, false, {"good night", "gotta go", "that's all"}},
         {"leaving", false, false, {"bye bye", "cya", "see ya", "ok bye", "I'm off.", "that's it for today",
                                    "farewell", "I have to leave now."}},
         {"later", true, false, {"see you later", "talk to you later"}}},
        {"Goodbye! Come back any time.", "Bye! Have a good day.", "See you later. Take care."}}},
  };
  return c;
}

// train: the intent's train families; test: its held-out families only (so every test prompt is a
// phrasing train never shows).
chat_parts make_chat(rng& r, split s, const std::string& intent) {
  const chat_intent& ci = chat_intents().at(intent);
  std::vector<const family*> fams;
  for (const auto& f : ci.families) {
    if (f.test_only == (s == split::test)) fams.push_back(&f);
  }
  const family* f = r.pick(fams);
  return {r.pick(f->phrasings), r.pick(ci.replies), f->name};
}

// "Repeat after me": the reply is the given text, exactly. It is the plainest test of copying what the user
// wrote, which every terminal request needs (the file name in the reply is the one in the prompt).
chat_parts make_repeat(rng& r, split s, const std::string& text) {
  static const std::vector<family> families = {
      {"repeat", false, false, {"Repeat after me: {x}", "repeat this: {x}", "Please repeat exactly: {x}"}},
      {"say", false, false, {"Say {x}", "say '{x}'", "Can you say \"{x}\"?", "say this back: {x}"}},
      {"copy", false, false, {"Copy this exactly: {x}", "copy: {x}", "Reply with exactly this text: {x}"}},
      {"write_back", true, false, {"Write {x} back to me.", "just type {x}", "Type back exactly what I write: {x}"}},
  };
  std::vector<const family*> fams;
  for (const auto& f : families) {
    if (f.test_only == (s == split::test)) fams.push_back(&f);
  }
  const family* f = r.pick(fams);
  return {fill(r.pick(f->phrasings), {{"x", text}}), text, f->name};
}

}  // namespace moxi::eval::detail
