/** What the agents and the demo agree on. */

/** What a task asks an agent to do. */
export interface AgentTask {
  user: string;
  text: string;
}

export const agentQueue = 'agent-tasks';
export const notificationsTopic = 'notifications';
/** Namespace of notification ids: uuidv5(task key) is the same for every attempt at a task. */
export const notificationNamespace = '6f1c2a7e-4d0b-4a53-9a55-2f7d8c1e0b11';
